package security_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeserver"
)

func TestTLSWithGeneratedCerts(t *testing.T) {
	dir := t.TempDir()
	files, err := security.GenerateCerts(dir, []string{"127.0.0.1", "store.example"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const token = "a-long-enough-cluster-token"
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) {
		c.Security = security.Security{Token: token, CertFile: files.Cert, KeyFile: files.Key}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tests := []struct {
		name string
		sec  security.Security
		ok   bool
	}{
		{"verified TLS with token", security.Security{Token: token, CAFile: files.CA}, true},
		{"verified TLS without token", security.Security{CAFile: files.CA}, false},
		{"TLS that does not trust the CA", security.Security{Token: token, TLS: true}, false},
		{"plain text", security.Security{}, false},
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
	if _, err := security.GenerateCerts(t.TempDir(), nil, time.Hour); err == nil {
		t.Fatal("certificates for no host")
	}
}

// A store whose certificate the token's CA signed is trusted by a node that
// holds only the token, and by no node with another token.
func TestTLSWithTokenCerts(t *testing.T) {
	const token = "a-long-enough-cluster-token"
	files, err := security.GenerateTokenCerts(t.TempDir(), token, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) {
		c.Security = security.Security{Token: token, CertFile: files.Cert, KeyFile: files.Key}
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
			if err := security.WriteTokenCA(ca, tt.caToken); err != nil {
				t.Fatal(err)
			}
			c := rendezvoustest.NewClient(t, s, security.Security{Token: token, CAFile: ca})
			if _, err := c.ListNodes(ctx, &musterv1.ListNodesRequest{}); (err == nil) != tt.ok {
				t.Fatalf("err = %v", err)
			}
		})
	}
	a, _, err := security.TokenCA(token)
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := security.TokenCA(token)
	if !bytes.Equal(a.Raw, b.Raw) {
		t.Error("one token gave two CA certificates")
	}
	if _, _, err := security.TokenCA(""); err == nil {
		t.Error("a CA from no token")
	}
}
