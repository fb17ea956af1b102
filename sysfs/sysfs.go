// Package sysfs reads sysfs attributes with a bound on their size, so that
// a broken or hostile file (a fixture, a container's bind mount) cannot make
// a reader allocate without limit.
package sysfs

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Read reads the file at path, refusing one longer than limit bytes.
func Read(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("read %s: longer than %d bytes", path, limit)
	}
	return b, nil
}

// ValidName accepts the device names the kernel makes (mlx5_0, rocep1s0f0,
// ibp12s0, eth0, enp3s0f1np1) and nothing that could confuse a list or a path.
func ValidName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// CompareNames orders device names with trailing numbers compared as
// numbers (mlx5_2 before mlx5_10), and otherwise as text.
func CompareNames(a, b string) int {
	ap, an := splitNum(a)
	bp, bn := splitNum(b)
	if ap != bp || an == bn {
		return strings.Compare(a, b)
	}
	return cmp.Compare(an, bn)
}

// splitNum cuts a name's trailing number (at most 9 digits) off it; -1
// when it has none.
func splitNum(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' && len(s)-i < 9 {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, -1
	}
	return s[:i], n
}
