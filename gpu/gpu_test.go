package gpu

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// FuzzParse checks that an accepted GPU list has distinct indices in range
// and that its canonical form parses back to the same list.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "0,1,2,3", " 7 , 3", "1,1", "-1", "a", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		devs, err := Parse(s)
		if err != nil {
			return
		}
		var idx []string
		seen := map[int]bool{}
		for _, d := range devs {
			if d.Index < 0 || d.Index > 1023 || seen[d.Index] {
				t.Fatalf("Parse(%q) accepted index %d", s, d.Index)
			}
			seen[d.Index] = true
			idx = append(idx, strconv.Itoa(d.Index))
		}
		again, err := Parse(strings.Join(idx, ","))
		if err != nil || len(again) != len(devs) {
			t.Fatalf("canonical form of %q: %v", s, err)
		}
	})
}

// FuzzFilter checks that a filter never invents devices or repeats one.
func FuzzFilter(f *testing.F) {
	devs := []Device{{Index: 0, UUID: "GPU-aa"}, {Index: 1, UUID: "GPU-ab"}, {Index: 3, UUID: "GPU-c"}}
	for _, s := range []string{"", "0,1", "GPU-a", "3,0,3", "-1,0", "9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Filter(devs, s)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, d := range got {
			if seen[d.Index] || (d.Index != 0 && d.Index != 1 && d.Index != 3) {
				t.Fatalf("Filter(%q) = %v", s, got)
			}
			seen[d.Index] = true
		}
	})
}

// A GPU's device file says the node has one; the driver's control files
// alone (nvidiactl, nvidia-uvm) do not.
func TestDeviceFile(t *testing.T) {
	for _, tc := range []struct {
		files []string
		want  string
	}{
		{nil, ""},
		{[]string{"null", "nvidiactl", "nvidia-uvm", "nvidia-modeset"}, ""},
		{[]string{"nvidiactl", "nvidia3", "nvidia1"}, "nvidia1"},
	} {
		dev := t.TempDir()
		for _, f := range tc.files {
			if err := os.WriteFile(filepath.Join(dev, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		want := tc.want
		if want != "" {
			want = filepath.Join(dev, want)
		}
		if got := DeviceFile(dev); got != want {
			t.Errorf("DeviceFile with %q = %q, want %q", tc.files, got, want)
		}
	}
}
