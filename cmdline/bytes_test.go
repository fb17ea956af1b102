package cmdline

import "testing"

func TestBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"512K", 512 << 10, ""},
		{"100M", 100 << 20, ""},
		{"1G", 1 << 30, ""},
		{"1GiB", 1 << 30, ""},
		{"2TiB", 2 << 40, ""},
		{"10B", 10, ""},
		{"1.5G", 0, "not a size: give bytes, or a number with K, M, G or T"},
		{"G", 0, "not a size: give bytes, or a number with K, M, G or T"},
		{"1iB", 0, "not a size: give bytes, or a number with K, M, G or T"},
		{"-1M", 0, "negative"},
		{"99999999999T", 0, "too large"},
		{"1x", 0, "not a size: give bytes, or a number with K, M, G or T"},
	}
	for _, tt := range tests {
		b := NewBytes(7)
		err := b.Set(tt.in)
		if got := errText(err); got != tt.err || (err == nil && b.Value() != tt.want) {
			t.Errorf("%q: %d, %q; want %d, %q", tt.in, b.Value(), got, tt.want, tt.err)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func FuzzBytes(f *testing.F) {
	for _, s := range []string{"1G", "512KiB", "10B", "-1", "1iB", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := NewBytes(0)
		if err := b.Set(s); err == nil && b.Value() < 0 {
			t.Fatalf("%q: %d bytes", s, b.Value())
		}
	})
}
