package jobspec

// Ranks are laid out by node: node rank n's workers are the global ranks
// n*nproc to n*nproc+nproc-1, local rank l the (n*nproc+l)-th. These two
// functions are that layout, for the store, the agent and the environment.

// GlobalRank is the global rank of local rank local on node rank node.
func GlobalRank(node, nproc, local int) int { return node*nproc + local }

// NodeOf is the node rank that holds global rank rank.
func NodeOf(rank, nproc int) int { return rank / nproc }
