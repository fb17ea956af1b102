package rendezvous_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
)

func TestTLSWithGeneratedCerts(t *testing.T) {
	dir := t.TempDir()
	files, err := rendezvous.GenerateCerts(dir, []string{"127.0.0.1", "store.example"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const token = "a-long-enough-cluster-token"
	s := rendezvoustest.NewStore(t, func(c *rendezvous.Config) {
		c.Security = rendezvous.Security{Token: token, CertFile: files.Cert, KeyFile: files.Key}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tests := []struct {
		name string
		sec  rendezvous.Security
		ok   bool
	}{
		{"verified TLS with token", rendezvous.Security{Token: token, CAFile: files.CA}, true},
		{"verified TLS without token", rendezvous.Security{CAFile: files.CA}, false},
		{"TLS that does not trust the CA", rendezvous.Security{Token: token, TLS: true}, false},
		{"plain text", rendezvous.Security{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rendezvoustest.NewClient(t, s, tt.sec)
			_, err := c.ListNodes(ctx, &musterv1.ListNodesRequest{})
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v", err)
			}
			if tt.name == "verified TLS without token" && status.Code(err) != codes.Unauthenticated {
				t.Fatalf("want Unauthenticated, got %v", err)
			}
		})
	}
	if _, err := rendezvous.GenerateCerts(t.TempDir(), nil, time.Hour); err == nil {
		t.Fatal("certificates for no host")
	}
}

// A store whose certificate the token's CA signed is trusted by a node that
// holds only the token, and by no node with another token.
func TestTLSWithTokenCerts(t *testing.T) {
	const token = "a-long-enough-cluster-token"
	files, err := rendezvous.GenerateTokenCerts(t.TempDir(), token, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := rendezvoustest.NewStore(t, func(c *rendezvous.Config) {
		c.Security = rendezvous.Security{Token: token, CertFile: files.Cert, KeyFile: files.Key}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tt := range []struct {
		name, caToken string
		ok            bool
	}{
		{"the same token's CA", token, true},
		{"another token's CA", "another-long-enough-cluster-token", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ca := filepath.Join(t.TempDir(), "ca.pem")
			if err := rendezvous.WriteTokenCA(ca, tt.caToken); err != nil {
				t.Fatal(err)
			}
			c := rendezvoustest.NewClient(t, s, rendezvous.Security{Token: token, CAFile: ca})
			if _, err := c.ListNodes(ctx, &musterv1.ListNodesRequest{}); (err == nil) != tt.ok {
				t.Fatalf("err = %v", err)
			}
		})
	}
	a, _, err := rendezvous.TokenCA(token)
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := rendezvous.TokenCA(token)
	if !bytes.Equal(a.Raw, b.Raw) {
		t.Error("one token gave two CA certificates")
	}
	if _, _, err := rendezvous.TokenCA(""); err == nil {
		t.Error("a CA from no token")
	}
}
