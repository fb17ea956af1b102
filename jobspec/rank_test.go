package jobspec

import "testing"

func TestRankLayout(t *testing.T) {
	tests := []struct{ node, nproc, local, rank int }{
		{0, 1, 0, 0}, {0, 4, 3, 3}, {1, 4, 0, 4}, {2, 8, 5, 21}, {9999, 8, 7, 79999},
	}
	for _, tt := range tests {
		if got := GlobalRank(tt.node, tt.nproc, tt.local); got != tt.rank {
			t.Errorf("GlobalRank(%d, %d, %d) = %d, want %d", tt.node, tt.nproc, tt.local, got, tt.rank)
		}
		if got := NodeOf(tt.rank, tt.nproc); got != tt.node {
			t.Errorf("NodeOf(%d, %d) = %d, want %d", tt.rank, tt.nproc, got, tt.node)
		}
	}
}
