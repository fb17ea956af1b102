package storeserver

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Questions waiting for one node are bounded, so that its command stream
// never fills with them; an answered or abandoned one frees its place.
func TestTorchChecksPerNode(t *testing.T) {
	var tc torchChecks
	answers := make(chan torchAnswer, maxTorchChecksPerNode+1)
	var open []map[string]string
	for range maxTorchChecksPerNode {
		ids, err := tc.open(map[string][]int{"b": {0}}, answers)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, ids)
	}
	if _, err := tc.open(map[string][]int{"c": {0}, "b": {1}}, answers); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("one question too many: %v", err)
	}
	// All or none: c got no question either.
	if n := tc.perNode["c"]; n != 0 {
		t.Fatalf("node c has %d questions", n)
	}
	if err := tc.answer(open[0]["b"], "b", []*musterv1.TorchConnVerdict{{Allowed: true}}); err != nil {
		t.Fatal(err)
	}
	tc.close(open[1])
	tc.close(open[0]) // answered already: nothing to do
	for range 2 {
		if _, err := tc.open(map[string][]int{"b": {0}}, answers); err != nil {
			t.Fatal(err)
		}
	}
	if a := <-answers; a.node != "b" || !a.verdicts[0].GetAllowed() {
		t.Fatalf("answer %v", a)
	}
}
