package storeclient_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

// A store call that fails on the way to the store says so in one line:
// which address or file, and what to check.
func TestErrorMessageOfUnreachableStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	good, err := security.GenerateCerts(t.TempDir(), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := security.GenerateCerts(t.TempDir(), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	wrongHost, err := security.GenerateCerts(t.TempDir(), []string{"10.9.9.9"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(files security.CertFiles) string {
		s, err := storeserver.Start(context.Background(), storeserver.Config{Logger: zaptest.NewLogger(t), ListenAddr: "127.0.0.1:0",
			Socket:   filepath.Join(t.TempDir(), "store.sock"),
			Security: security.Security{Token: "0123456789abcdef0123456789abcdef", CertFile: files.Cert, KeyFile: files.Key}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s.Addr()
	}
	tlsStore, wrongHostStore := serve(good), serve(wrongHost)
	sock := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		name string
		addr string
		sec  security.Security
		want string
	}{
		{"refused", closed, security.Security{},
			"cannot reach the store at " + closed + ": connection refused; is an agent with --listen running there?"},
		{"no socket", "unix://" + sock, security.Security{},
			"cannot reach the store at " + sock + ": no such file or directory; is an agent running on this machine?"},
		{"another CA", tlsStore, security.Security{CAFile: other.CA},
			"the store at " + tlsStore + " presents a certificate not signed by the CA in " + other.CA +
				"; give --tls-ca the ca.pem that `launcher certs` wrote with the store's certificate"},
		{"not for this address", wrongHostStore, security.Security{CAFile: wrongHost.CA},
			"the store's certificate is not valid for " + wrongHostStore + " (x509: certificate is valid for 10.9.9.9, not 127.0.0.1); " +
				"make one that names it with: launcher certs 127.0.0.1"},
		{"TLS store, no TLS", tlsStore, security.Security{},
			"the store closed the connection before answering: if it serves TLS, give --tls-ca its CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := storeclient.Dial(tt.addr, tt.sec)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.ListNodes(ctx, &musterv1.ListNodesRequest{})
			if err == nil {
				t.Fatal("ListNodes succeeded")
			}
			if got := storeclient.ErrorMessage(err); got != tt.want {
				t.Errorf("message\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}
