package main

import "github.com/musterhq/muster/cmdline"

// foreignRunFlags are torchrun's and mpirun's flags that launcher run knows
// without having them: those with nothing to do here run the job and say so
// once, those meaning something else here are refused saying what to type.
// Spellings that mean the same as muster's are aliases of its own flags.
var foreignRunFlags = []cmdline.Foreign{
	{Name: "standalone", Note: "without --cluster the job already runs on this machine alone, with a rendezvous of its own"},
	{Name: "tee", TakesValue: true, Note: "every rank's output is printed anyway, and --log-dir DIR also writes it to files"},
	{Name: "rdzv-backend", TakesValue: true, Note: "muster's store is the rendezvous"},
	{Name: "rdzv_backend", TakesValue: true, Note: "muster's store is the rendezvous"},
	{Name: "rdzv-id", TakesValue: true, Note: "muster gives each job an ID of its own (launcher jobs lists them)"},
	{Name: "rdzv_id", TakesValue: true, Note: "muster gives each job an ID of its own (launcher jobs lists them)"},
	{Name: "oversubscribe", Note: "muster starts the workers asked for, however many cores there are"},
	{Name: "allow-run-as-root", Note: "muster runs root's jobs without it"},

	{Name: "node-rank", TakesValue: true, Instead: nodeRankInstead},
	{Name: "node_rank", TakesValue: true, Instead: nodeRankInstead},
	{Name: "master-addr", TakesValue: true, Instead: masterInstead},
	{Name: "master_addr", TakesValue: true, Instead: masterInstead},
	{Name: "master-port", TakesValue: true, Instead: masterInstead},
	{Name: "master_port", TakesValue: true, Instead: masterInstead},
	{Name: "rdzv-endpoint", TakesValue: true, Instead: rdzvInstead},
	{Name: "rdzv_endpoint", TakesValue: true, Instead: rdzvInstead},
	{Name: "redirects", TakesValue: true, Instead: "muster prints every rank's output: --output-ranks LIST prints only some, --log-dir DIR also writes each rank's to files"},
	{Name: "N", TakesValue: true, Instead: "mpirun's -N is workers per node, --nproc here; srun's is nodes, -n (--nnodes) here"},
	{Name: "bind-to", TakesValue: true, Instead: bindingInstead},
	{Name: "map-by", TakesValue: true, Instead: bindingInstead},
}

const (
	nodeRankInstead = "launcher run starts every node's workers itself; to start one node's share as torchrun does, run agent run on each node (--rdzv HOST:PORT, --node-rank there)"
	masterInstead   = "not needed: muster picks MASTER_ADDR and MASTER_PORT for each round and gives them to every worker"
	rdzvInstead     = "give --cluster HOST:PORT to run on a cluster's store, or start each node with agent run --rdzv HOST:PORT"
	bindingInstead  = "muster binds each worker to its own GPUs' CPUs: --cpu-bind numa, socket or cores (--report-bindings prints what each rank got)"
)
