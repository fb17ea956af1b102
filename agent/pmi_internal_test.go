package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/musterhq/muster/pmi"
)

// A worker's exit as its PMI connection tells it.
func TestPMIOutcome(t *testing.T) {
	tests := []struct {
		name string
		exit exitStatus
		res  pmi.Result
		want exitStatus
	}{
		{"finalized and exited 0", exitStatus{}, pmi.Result{Finalized: true}, exitStatus{}},
		{"finalized, then the connection was cancelled", exitStatus{}, pmi.Result{Finalized: true, Err: context.Canceled}, exitStatus{}},
		{"MPI_Abort, then killed", exitStatus{signal: 15}, pmi.Result{Aborted: true, ExitCode: 7},
			exitStatus{code: 7, aborted: true, err: "called MPI_Abort with exit code 7"}},
		{"exited 0 without finalize", exitStatus{}, pmi.Result{Spoke: true, Err: fmt.Errorf("rank 1 %w", pmi.ErrNotFinalized)},
			exitStatus{err: "exited with code 0 without MPI_Finalize (its PMI connection closed first)"}},
		{"exited 0, cancelled before the close was read", exitStatus{}, pmi.Result{Spoke: true, Err: fmt.Errorf("%w: read", context.Canceled)},
			exitStatus{err: "exited with code 0 without MPI_Finalize (its PMI connection closed first)"}},
		{"exited 0 without a word of PMI", exitStatus{}, pmi.Result{Err: fmt.Errorf("rank 1 %w", pmi.ErrNotFinalized)},
			exitStatus{err: "exited with code 0 without a word of PMI: not an MPICH program? (Open MPI programs need --mpi openmpi)"}},
		{"exited 0 after bad PMI input", exitStatus{}, pmi.Result{Spoke: true, Err: errors.New("rank 1: pmi: line too long")},
			exitStatus{err: "exited with code 0, but its PMI connection failed: rank 1: pmi: line too long"}},
		{"failed by itself: its own code stays", exitStatus{code: 3}, pmi.Result{Err: pmi.ErrNotFinalized}, exitStatus{code: 3}},
		{"stopped: its signal stays", exitStatus{signal: 15}, pmi.Result{Err: context.Canceled}, exitStatus{signal: 15}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := &pmiConn{cancel: func() {}, result: make(chan pmi.Result, 1)}
			pc.result <- tt.res
			if got := pc.outcome(tt.exit); got != tt.want {
				t.Errorf("outcome = %+v, want %+v", got, tt.want)
			}
		})
	}
}
