package rendezvous

import (
	"crypto/subtle"
	"fmt"
	"strings"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
)

// JobForToken returns the running job a credential belongs to.
func (s *Store) JobForToken(tok string) (string, error) {
	id, _, ok := strings.Cut(tok, ".")
	if !ok || len(tok) > 256 {
		return "", security.ErrBadJobToken
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil || j.finished() || subtle.ConstantTimeCompare([]byte(tok), []byte(j.token)) != 1 {
		return "", security.ErrBadJobToken
	}
	return id, nil
}

// JobOwner returns who submitted a job; nil for the cluster operator.
func (s *Store) JobOwner(id string) (*musterv1.Identity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return nil, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	return j.owner, nil
}
