package rendezvous

import "errors"

// ErrNotFound is returned for a key, job or node the store does not hold.
var ErrNotFound = errors.New("not found")
