package agent

import (
	"strings"
	"testing"

	"github.com/musterhq/muster/envprop"
)

func TestMinimalEnviron(t *testing.T) {
	env := minimalEnviron([]string{"PATH=/bin", "SECRET=x", "HOME=/root"})
	if strings.Join(env, " ") != "PATH=/bin HOME=/root" {
		t.Fatalf("minimal environ = %v", env)
	}
	if _, ok := envprop.Lookup(env, "SECRET"); ok {
		t.Fatal("leaked")
	}
}
