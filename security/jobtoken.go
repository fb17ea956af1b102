package security

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
)

// A job credential is "JOBID.SECRET": the store mints one per job, the
// agents hand it to the job's workers (MUSTER_JOB_TOKEN), and it opens that
// job's KV and barriers only, until the job ends.

// ErrBadJobToken refuses a credential of no running job.
var ErrBadJobToken = errors.New("job credential is not valid: its job ended, or the store never issued it")

// NewJobToken mints a job's credential.
func NewJobToken(jobID string) string {
	var b [32]byte
	rand.Read(b[:])
	return jobID + "." + hex.EncodeToString(b[:])
}
