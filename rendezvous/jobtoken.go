package rendezvous

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A job credential is "JOBID.SECRET": the store mints one per job, the
// agents hand it to the job's workers (MUSTER_JOB_TOKEN), and it opens that
// job's KV and barriers only, until the job ends.

var errBadJobToken = errors.New("job credential is not valid: its job ended, or the store never issued it")

func newJobToken(jobID string) string {
	var b [32]byte
	rand.Read(b[:])
	return jobID + "." + hex.EncodeToString(b[:])
}

// jobForToken returns the running job a credential belongs to.
func (s *Store) jobForToken(tok string) (string, error) {
	id, _, ok := strings.Cut(tok, ".")
	if !ok || len(tok) > 256 {
		return "", errBadJobToken
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil || j.finished() || subtle.ConstantTimeCompare([]byte(tok), []byte(j.token)) != 1 {
		return "", errBadJobToken
	}
	return id, nil
}

// jobOwner returns who submitted a job; nil for the cluster operator.
func (s *Store) jobOwner(id string) (*musterv1.Identity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return nil, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	return j.owner, nil
}
