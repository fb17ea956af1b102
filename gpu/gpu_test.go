package gpu

import (
	"slices"
	"strings"
	"testing"
)

func TestFilter(t *testing.T) {
	devs := []Device{{Index: 0, UUID: "GPU-aaaa"}, {Index: 1, UUID: "GPU-bbbb"}, {Index: 2, UUID: "GPU-cccc"}}
	tests := []struct {
		visible string
		want    []int
		err     string
	}{
		{"", []int{0, 1, 2}, ""},
		{"2,0", []int{2, 0}, ""},
		{"GPU-bb", []int{1}, ""},
		{"1,1", []int{1}, ""},
		{"0,-1,2", []int{0}, ""},
		{"7", nil, "no GPU \"7\""},
	}
	for _, tt := range tests {
		got, err := Filter(devs, tt.visible)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Filter(%q) error %v, want %q", tt.visible, err, tt.err)
			}
			continue
		}
		var idx []int
		for _, d := range got {
			idx = append(idx, d.Index)
		}
		if err != nil || !slices.Equal(idx, tt.want) {
			t.Errorf("Filter(%q) = %v, %v; want %v", tt.visible, idx, err, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	devs, err := Parse("0, 1,3")
	if err != nil || len(devs) != 3 || devs[2].Index != 3 {
		t.Fatalf("Parse = %v, %v", devs, err)
	}
	for _, bad := range []string{"", "a", "1,1", "-1", "5000"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestDiscoverWithoutGPUSaysWhy(t *testing.T) {
	devs, err := Discover("")
	if err != nil {
		if err.Error() == "" {
			t.Fatal("empty error")
		}
		t.Logf("no GPUs here: %v", err)
		return
	}
	for i, d := range devs {
		if d.Index != i || d.UUID == "" {
			t.Errorf("device %d: %+v", i, d)
		}
	}
}
