package launch

import (
	"os"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
)

// TestMain fails the package's tests when a worker they started outlives them.
func TestMain(m *testing.M) {
	os.Exit(testfixture.CheckNoneLeft(m.Run, 5*time.Second))
}
