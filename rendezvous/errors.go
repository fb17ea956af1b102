package rendezvous

import "errors"

// ErrNotFound is returned for a key, job or node the store does not hold.
var ErrNotFound = errors.New("not found")

// ErrReporting is a job a store that restarted moments ago does not hold
// yet: its agents may still be reporting it.
var ErrReporting = errors.New("not reported yet: the store restarted moments ago, and its agents are still reporting their jobs")
