// Package progress words a job's progress for people, the same way
// wherever it is said: the store in its errors, the launcher in its
// progress lines. It links neither.
package progress

import (
	"fmt"
	"strings"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// DescribeWaiting says what a waiting round has and lacks, e.g.
// "2 of 4 ready (a, b); 2 missing".
func DescribeWaiting(w *musterv1.WaitingForNodes) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d ready", w.GetReady(), w.GetWanted())
	if names := w.GetReadyNodes(); len(names) > 0 {
		b.WriteString(" (" + strings.Join(names, ", "))
		if more := int(w.GetReady()) - len(names); more > 0 {
			fmt.Fprintf(&b, ", and %d more", more)
		}
		b.WriteString(")")
	}
	if missing := w.GetWanted() - w.GetReady(); missing > 0 {
		fmt.Fprintf(&b, "; %d missing", missing)
		if least := w.GetLeast(); least > 0 {
			fmt.Fprintf(&b, " (at least %d needed)", least)
		}
	}
	if u := w.GetUnusable(); len(u) > 0 {
		b.WriteString("; not usable: " + strings.Join(u, "; "))
	}
	if held := w.GetHeld(); held != "" {
		fmt.Fprintf(&b, "; held until %s for %s", time.UnixMilli(w.GetHeldUntilUnixMs()).UTC().Format("15:04:05Z"), held)
	}
	return b.String()
}
