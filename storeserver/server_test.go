package storeserver_test

import (
	"context"
	"net"
	"strings"
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

const token = "0123456789abcdef0123456789abcdef"

// start serves a store on lis for the test.
func start(t *testing.T, lis net.Listener) *storeserver.Server {
	t.Helper()
	s, err := storeserver.Start(context.Background(), storeserver.Config{Logger: zaptest.NewLogger(t), Listener: lis,
		Security: security.Security{Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// Over TCP every call carries the cluster token, agents' calls too; a job's
// credential must be one the store gave out. The health check alone
// answers anyone: probes carry no token.
func TestCallsNeedTheToken(t *testing.T) {
	s := start(t, listen(t))
	tests := []struct {
		name string
		sec  security.Security
		want codes.Code
	}{
		{"the token", security.Security{Token: token}, codes.OK},
		{"no token", security.Security{}, codes.Unauthenticated},
		{"another token", security.Security{Token: strings.Repeat("f", len(token))}, codes.Unauthenticated},
		{"a job credential never given", security.Security{JobToken: "job-1:forged"}, codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := storeclient.Dial(s.Addr(), tt.sec)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Ping(ctx); err != nil {
				t.Errorf("Ping: %v, want an answer without a token", err)
			}
			calls := map[string]error{}
			_, calls["ListNodes"] = c.ListNodes(ctx, &musterv1.ListNodesRequest{})
			_, calls["Register"] = c.Register(ctx, &musterv1.RegisterRequest{Node: &musterv1.Node{Name: "n", Addr: "127.0.0.1"}, NodeKey: "k"})
			for name, err := range calls {
				if got := status.Code(err); got != tt.want {
					t.Errorf("%s: %v, want %s", name, err, tt.want)
				}
			}
		})
	}
}

// Err tells a listener that failed under the server from a Close: the
// first delivers why, the second nothing; both close it once serving ended.
func TestErr(t *testing.T) {
	t.Run("listener fails", func(t *testing.T) {
		lis := listen(t)
		s := start(t, lis)
		lis.Close()
		err, ok := <-s.Err()
		if !ok || !strings.Contains(err.Error(), "store stopped serving "+s.Addr()) {
			t.Fatalf("Err: %v (open %v); want the listener's failure", err, ok)
		}
		s.Close()
		if err, ok := <-s.Err(); ok {
			t.Fatalf("Err after Close: %v; want it closed", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		s := start(t, listen(t))
		s.Close()
		for err := range s.Err() {
			t.Fatalf("Err after Close: %v", err)
		}
	})
}
