package storeclient_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

// Each way of dialling reaches a store served in this process, over TCP
// with the token or over its socket as this user, and lists its nodes.
func TestDialReachesStore(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	s, err := storeserver.Start(context.Background(), storeserver.Config{Logger: zaptest.NewLogger(t), ListenAddr: "127.0.0.1:0",
		Socket: filepath.Join(t.TempDir(), "store.sock"), Security: security.Security{Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	tcp := security.Security{Token: token}
	tests := []struct {
		name string
		dial func(string, security.Security) (*storeclient.Client, error)
		addr string
		sec  security.Security
	}{
		{"Dial, TCP", storeclient.Dial, s.Addr(), tcp},
		{"Dial, socket", storeclient.Dial, s.SocketAddr(), security.Security{}},
		{"DialAgent, TCP", storeclient.DialAgent, s.Addr(), tcp},
		{"DialInProcess, socket", storeclient.DialInProcess, s.SocketAddr(), security.Security{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.dial(tt.addr, tt.sec)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			resp, err := c.ListNodes(ctx, &musterv1.ListNodesRequest{})
			if err != nil || len(resp.GetNodes()) != 0 {
				t.Fatalf("ListNodes: %v, %v; want no nodes", resp, err)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{status.Error(codes.NotFound, "job j-1 not found"), "job j-1 not found"},
		{errors.New("plain"), "plain"},
	} {
		if got := storeclient.ErrorMessage(tt.err); got != tt.want {
			t.Errorf("ErrorMessage(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
