package agent

// Stats is what the agent holds now, for metrics read at scrape time.
type Stats struct {
	Jobs int // jobs running on this node
	// TCPStores is how many of the jobs' PyTorch TCPStores the node serves;
	// TCPStoreConns and TCPStoreKeys their connections and keys together.
	TCPStores, TCPStoreConns, TCPStoreKeys int
}

// Stats counts the node's jobs and TCPStores now.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	st := Stats{Jobs: len(a.jobs), TCPStores: len(a.torchStores)}
	stores := make([]*torchStore, 0, len(a.torchStores))
	for _, ts := range a.torchStores {
		stores = append(stores, ts)
	}
	a.mu.Unlock()
	st.TCPStoreConns = a.torchConns.Held()
	for _, ts := range stores {
		st.TCPStoreKeys += ts.kv.Keys()
	}
	return st
}

// Connected says whether the agent is registered with the store and its
// Watch stream, which brings the store's commands, is in place.
func (a *Agent) Connected() bool { return a.connected.Load() }

// GPUError is why GPU discovery found no GPUs on this node, or "".
func (a *Agent) GPUError() string { return a.cfg.GPUError }
