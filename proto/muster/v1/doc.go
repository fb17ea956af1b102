// Package musterv1 is muster's gRPC API, generated from the .proto files
// beside it: Agents (agent and store), Jobs (launcher and store) and KV
// (workers).
package musterv1
