package main

import "github.com/musterhq/muster/cmdline"

// The agent's flag groups, in the order its help shows them.
var agentCategories = []string{"Store", "Cluster", "Security", "GPUs and health", "Workers", "Logs and metrics"}

// agentExamples end the agent's help: one line for each common way to run it.
const agentExamples = `   agent                                                   this machine alone: a store on 127.0.0.1:29400 and its agent
   agent --listen 10.0.0.1:29400 --tls-cert store.pem --tls-key store-key.pem --tls-ca ca.pem
                                                           the head node: hosts the store; others --join it
   agent --join 10.0.0.1 --tls-ca ca.pem                   a node of the head's cluster, found through gossip
   agent --store 10.0.0.1:29400 --tls-ca ca.pem            a node that joins the store at that address
   agent --listen 10.0.0.1:29400 --store-peers 10.0.0.1:29400,10.0.0.2:29400,10.0.0.3:29400 --data-dir /var/lib/muster ...
                                                           one of three heads, each hosting a replica of the store
   agent run --rdzv head:29400 --nnodes 2 --gpus 8 -- python train.py
                                                           a container's entrypoint: one node of a job

   Every flag: docs/cluster.md and docs/operations.md in muster's source.`

// agentHelpTemplate is the agent's help: its commands, its flags in
// agentCategories' groups, then examples.
func agentHelpTemplate() string {
	return cmdline.GroupedHelp(cmdline.AppHelpHeader, agentCategories, agentExamples)
}
