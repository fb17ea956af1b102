package gpu

import (
	"errors"
	"strings"
	"testing"
)

// fakeNVML answers as NVML would on a machine whose GPUs it describes.
type fakeNVML struct {
	openErr error
	present map[int]string
	memory  map[int]MemoryHealth
	broken  map[int]bool // Memory fails
	xids    []XID
	opens   int
}

func (f *fakeNVML) Open() error {
	f.opens++
	return f.openErr
}
func (f *fakeNVML) Close()                           {}
func (f *fakeNVML) Present() (map[int]string, error) { return f.present, nil }
func (f *fakeNVML) Memory(i int) (MemoryHealth, error) {
	if f.broken[i] {
		return MemoryHealth{}, errors.New("GPU is lost")
	}
	return f.memory[i], nil
}
func (f *fakeNVML) XIDs() ([]XID, error) {
	x := f.xids
	f.xids = nil
	return x, nil
}

func TestCheckerCheck(t *testing.T) {
	two := []Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}}
	for _, tt := range []struct {
		name    string
		devs    []Device
		lib     *fakeNVML
		note    string
		wantErr string // every part must appear
	}{
		{"no GPUs", nil, &fakeNVML{openErr: errors.New("no library")}, "no GPUs", ""},
		{"declared GPUs", []Device{{Index: 0, Name: "declared"}}, &fakeNVML{openErr: errors.New("no library")}, "declared GPUs", ""},
		{"healthy", two, &fakeNVML{present: map[int]string{0: "GPU-a", 1: "GPU-b"}}, "2 GPUs healthy", ""},
		{"NVML gone", two, &fakeNVML{openErr: errors.New("driver not loaded")}, "", "NVML does not answer: driver not loaded"},
		{"a GPU gone", two, &fakeNVML{present: map[int]string{0: "GPU-a"}}, "", "GPU 1 (GPU-b) is gone"},
		{"a GPU silent", two, &fakeNVML{present: map[int]string{0: "GPU-a", 1: "GPU-b"}, broken: map[int]bool{1: true}}, "",
			"GPU 1 does not answer NVML: GPU is lost"},
		{"ECC and remapping", two, &fakeNVML{present: map[int]string{0: "GPU-a", 1: "GPU-b"},
			memory: map[int]MemoryHealth{0: {UncorrectableECC: 2}, 1: {RemapPending: true, RemapFailed: true}}}, "",
			"GPU 0 has 2 uncorrectable ECC errors; GPU 1 has a row remapping pending (reset the GPU); GPU 1 failed to remap a row"},
		{"an XID", two, &fakeNVML{present: map[int]string{0: "GPU-a", 1: "GPU-b"}, xids: []XID{{Index: 1, Code: 79}}}, "",
			"GPU 1 reported XID 79 since the last check"},
		{"an XID of a GPU not offered", two[:1], &fakeNVML{present: map[int]string{0: "GPU-a", 1: "GPU-b"}, xids: []XID{{Index: 1, Code: 79}}},
			"1 GPUs healthy", ""},
		// The index NVML gives now counts, not the one the GPU was offered under.
		{"renumbered", two, &fakeNVML{present: map[int]string{0: "GPU-b", 1: "GPU-a"}, memory: map[int]MemoryHealth{0: {UncorrectableECC: 1}}}, "",
			"GPU 1 has 1 uncorrectable ECC errors"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			note, err := NewCheckerWith(tt.devs, tt.lib).Check()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Check() = %q, %v; want error %q", note, err, tt.wantErr)
				}
				return
			}
			if err != nil || !strings.Contains(note, tt.note) {
				t.Fatalf("Check() = %q, %v; want a note with %q", note, err, tt.note)
			}
		})
	}
}

// The session stays open between checks: an XID between two rounds fails
// the second check, and the one after passes again.
func TestCheckerKeepsItsSession(t *testing.T) {
	lib := &fakeNVML{present: map[int]string{0: "GPU-a"}}
	c := NewCheckerWith([]Device{{Index: 0, UUID: "GPU-a"}}, lib)
	if err := c.Open(); err != nil {
		t.Fatal(err)
	}
	// An XID between the agent's start and its first round.
	lib.xids = []XID{{Index: 0, Code: 79}}
	if _, err := c.Check(); err == nil || !strings.Contains(err.Error(), "XID 79") {
		t.Fatalf("first check: %v, want XID 79", err)
	}
	if _, err := c.Check(); err != nil {
		t.Fatal(err)
	}
	lib.xids = []XID{{Index: 0, Code: 48}}
	if _, err := c.Check(); err == nil || !strings.Contains(err.Error(), "XID 48") {
		t.Fatalf("second check: %v, want XID 48", err)
	}
	if _, err := c.Check(); err != nil {
		t.Fatalf("third check: %v", err)
	}
	if lib.opens != 1 {
		t.Fatalf("NVML opened %d times, want once", lib.opens)
	}
}
