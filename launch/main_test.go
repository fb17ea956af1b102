package launch

import (
	"os"
	"testing"

	"github.com/musterhq/muster/supervise"
)

// TestMain lets this test binary serve as a job's shim, as the launcher's
// binary does.
func TestMain(m *testing.M) {
	supervise.RunShimIfRequested()
	os.Exit(m.Run())
}
