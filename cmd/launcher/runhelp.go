package main

import "github.com/musterhq/muster/cmdline"

// The groups of run's flags, in the order its help shows them: where the
// job runs, what its workers get, how Python programs start, its output, what happens when it fails,
// MPI, and how the launcher reaches a cluster.
const (
	catPlacement   = "Placement"
	catEnvironment = "Environment"
	catPython      = "Python"
	catOutput      = "Output"
	catFailures    = "Failure handling"
	catMPI         = "MPI"
	catCluster     = "Cluster"
)

var runCategories = []string{catPlacement, catEnvironment, catPython, catOutput, catFailures, catMPI, catCluster}

// runExamples end run's help: one line for each common way to run.
const runExamples = `   launcher run --gpus 2 -- python train.py                  one worker per GPU, on this machine
   launcher run --nproc 4 -- ./cpu_job                       four workers without GPUs
   launcher run --gpus 4 --nproc 2 -- python train.py        two workers with two GPUs each
   launcher run --nproc 2 train.py --lr 0.1                  a .py program runs under python3 -u, as torchrun runs it
   launcher run --nproc 2 -m pkg.train --lr 0.1              a module: python3 -u -m pkg.train
   launcher run --nproc 4 --mpi mpich -- ./hello             an MPICH program, no mpiexec
   launcher run -n 2 --gpus 8 -- python train.py             two nodes, through this machine's agent
   launcher run --cluster head:29400 --tls-ca ca.pem -n 2 --gpus 8 -- python train.py
                                                             the same from another machine
   launcher run --timeout 2h --max-restarts 3 --log-dir logs -- python train.py
   launcher run -n 2:4 --max-restarts 3 --no-restart-exit-codes 93 --health-check ./check.sh -- python train.py
                                                             elastic, 2 to 4 nodes, each checked before every round

   Every flag, durations and exit statuses: docs/flags.md in muster's source.`

// runHelpTemplate is run's help: its flags in runCategories' groups, then
// examples.
func runHelpTemplate() string {
	return cmdline.GroupedHelp(cmdline.CommandHelpHeader, runCategories, runExamples)
}
