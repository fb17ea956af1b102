package hostfile

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	tests := []struct {
		in   string
		want Format
	}{
		{"a:2\nb:2\n", MPICH},
		{"# c\na\nb:4 # x\n", MPICH},
		{"a slots=2\nb slots=4\n", DeepSpeed},
		{"# c\na slots=2 # x\n", DeepSpeed},
		{"a slots=2\nb\n", OpenMPI},
		{"a\nb\n", OpenMPI},
		{"a slots=2 max_slots=4\n", OpenMPI},
		{"a slots=2 // x\n", OpenMPI},
		{"u@a slots=2\n", OpenMPI},
		{"fe80::1 slots=2\n", DeepSpeed},
		{"fe80::1\n", OpenMPI},
		{"", OpenMPI},
		{"/*\nold:2\n*/\na slots=2\n", OpenMPI},
		{"a slots=2 /* x:2 */\n", OpenMPI},
		{"# x:2\na slots=2\n", DeepSpeed},
	}
	for _, tt := range tests {
		if got := Detect([]byte(tt.in)); got != tt.want {
			t.Errorf("Detect(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hosts")
	if err := os.WriteFile(path, []byte("a:2\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	want := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadFile = %+v, %v; want %+v", got, err, want)
	}
	if err := os.WriteFile(path, []byte("a slots=2\nb slots=two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ReadFile(path)
	if want := path + `:2: slots must be a positive integer, got "two"`; err == nil || err.Error() != want {
		t.Fatalf("ReadFile error = %v, want %s", err, want)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Fatalf("ReadFile(missing) error = %v, want not exist", err)
	}
}

func TestParseAutoTooLarge(t *testing.T) {
	r := bytes.NewReader(bytes.Repeat([]byte("#\n"), MaxFileSize/2+1))
	if _, _, err := ParseAuto("big", r); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("ParseAuto error = %v, want too large", err)
	}
}

// FuzzParse checks every format: no panic, only valid hosts, and emitting
// then parsing again gives the same hosts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"foo.example.com\nbar.example.com slots=2\n",
		"node0 slots=2 max_slots=20\n",
		"a cpu=2 # x\n/* y\n*/ b count=3 max-slots=4 username=u\nu@c\n",
		"a\na\nb slots=2\nb\n",
		"donner:2 # first\nfoo:3\nfoo\n",
		"worker-1 slots=4\nworker-2 slots=4\n",
		"fe80::1 slots=2\n10.0.0.1:4\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, format := range Formats() {
			hosts, err := Parse("f", strings.NewReader(in), format)
			if err != nil {
				continue
			}
			checkRoundTrip(t, format, hosts)
		}
		hosts, format, err := ParseAuto("f", strings.NewReader(in))
		if err != nil {
			return
		}
		checkRoundTrip(t, format, hosts)
		// An Open MPI file says everything any parse gives.
		var b bytes.Buffer
		if err := Emit(&b, OpenMPI, hosts); err != nil {
			t.Fatalf("Emit(openmpi, %+v): %v", hosts, err)
		}
		again, _, err := ParseAuto("f", &b)
		if err != nil || !sameHosts(again, hosts) {
			t.Fatalf("auto %s: %+v became %+v, %v through\n%s", format, hosts, again, err, b.String())
		}
	})
}

func checkRoundTrip(t *testing.T, format Format, hosts []Host) {
	t.Helper()
	seen := map[string]bool{}
	for _, h := range hosts {
		if err := checkHost(h); err != nil {
			t.Fatalf("%s parse gave invalid host %+v: %v", format, h, err)
		}
		if seen[h.Name] {
			t.Fatalf("%s parse gave %s twice", format, h.Name)
		}
		seen[h.Name] = true
	}
	var b bytes.Buffer
	if err := Emit(&b, format, hosts); err != nil {
		t.Fatalf("Emit(%s, %+v): %v", format, hosts, err)
	}
	again, err := Parse("f", &b, format)
	if err != nil || !sameHosts(again, hosts) {
		t.Fatalf("%s: %+v became %+v, %v", format, hosts, again, err)
	}
}

func sameHosts(a, b []Host) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}
