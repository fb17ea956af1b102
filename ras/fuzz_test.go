package ras

import (
	"os"
	"path/filepath"
	"testing"
)

func addFixtures(f *testing.F, pattern string) {
	files, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(files) == 0 {
		f.Fatalf("no fixtures %s: %v", pattern, err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkBounds holds for any report the parsers return.
func checkBounds(t *testing.T, r *Report) {
	if len(r.Comms) > maxComms || len(r.Groups) > maxGroups {
		t.Fatalf("%d comms, %d groups", len(r.Comms), len(r.Groups))
	}
	n := len(r.MissingProcesses) + len(r.DeadProcesses)
	for _, c := range r.Comms {
		if !hexID(c.ID) || r.Format == "json" && len(c.ID) != 16 {
			t.Fatalf("comm ID %q", c.ID)
		}
		if len(c.Ops) > maxOpsPerComm {
			t.Fatalf("%d ops", len(c.Ops))
		}
		n += len(c.Missing) + len(c.StatusOutliers) + len(c.Errors)
		for _, op := range c.Ops {
			n += len(op.Behind)
			if op.BehindRanks < len(op.Behind) {
				t.Fatalf("op %+v", op)
			}
			for _, m := range op.Behind {
				if m.Launched >= op.Launched {
					t.Fatalf("behind at %d of %d", m.Launched, op.Launched)
				}
			}
		}
	}
	if n > maxMembers {
		t.Fatalf("%d members", n)
	}
	if c := r.Culprits(); len(c) > n {
		t.Fatalf("%d culprits of %d members", len(c), n)
	}
}

func FuzzParseText(f *testing.F) {
	addFixtures(f, "*.txt")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseText(b)
		if err != nil {
			return
		}
		checkBounds(t, r)
	})
}

func FuzzParseJSON(f *testing.F) {
	addFixtures(f, "*.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseJSON(b)
		if err != nil {
			return
		}
		checkBounds(t, r)
	})
}
