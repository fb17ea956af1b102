package sysfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"short": "4: ACTIVE\n", "exact": strings.Repeat("x", 16), "long": strings.Repeat("x", 17)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		want    string
		wantErr bool
	}{
		{"short", "4: ACTIVE\n", false},
		{"exact", strings.Repeat("x", 16), false},
		{"long", "", true},
		{"missing", "", true},
	}
	for _, tt := range tests {
		b, err := Read(filepath.Join(dir, tt.name), 16)
		if (err != nil) != tt.wantErr || string(b) != tt.want {
			t.Errorf("Read(%s) = %q, %v", tt.name, b, err)
		}
	}
}

func TestValidName(t *testing.T) {
	for s, want := range map[string]bool{"mlx5_0": true, "enp3s0f1np1": true, "eth0.100": true, "": false, "a,b": false, "../x": false, "a:1": false, strings.Repeat("a", 65): false} {
		if got := ValidName(s); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestCompareNames(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"mlx5_2", "mlx5_10", -1},
		{"mlx5_10", "mlx5_2", 1},
		{"mlx5_1", "mlx5_1", 0},
		{"eth0", "mlx5_0", -1},
		{"ibp12s0", "ibp9s0", -1}, // the trailing number is 0 in both: as text
		{"eno", "eno1", -1},
	} {
		if got := CompareNames(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareNames(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
