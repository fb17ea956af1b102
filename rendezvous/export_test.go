package rendezvous

// Internals the external tests (package rendezvous_test) reach.

// ServerStore is the store s serves.
func ServerStore(s *Server) *Store { return s.store }

// TrustedSocket is trustedSocket.
var TrustedSocket = trustedSocket
