package ncclprobe

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// The test binary answers as an agent's binary does: TestMain runs the
// child's side when asked.
func TestMain(m *testing.M) {
	RunIfRequested(func() (int, error) {
		if v := os.Getenv("PROBE_TEST_VERSION"); v != "" {
			return len(v) * 10000, nil
		}
		return 0, errors.New("libnccl.so.2: not found")
	})
	os.Exit(m.Run())
}

func TestVersion(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		version string
		want    int
		err     string
	}{
		{"found", "xx", 20000, ""},
		{"not found", "", 0, "libnccl.so.2: not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PROBE_TEST_VERSION", tt.version)
			got, err := Version(t.Context(), exe)
			if got != tt.want || (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("Version = %d, %v; want %d, %q", got, err, tt.want, tt.err)
			}
		})
	}
}
