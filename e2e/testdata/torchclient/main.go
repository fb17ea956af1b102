// Command torchclient is a worker for the end-to-end tests that does what
// a torch rank does with env:// and TORCHELASTIC_USE_AGENT_STORE: it
// connects to the TCPStore on MASTER_ADDR:MASTER_PORT as a client, counts
// itself in under "init/", and takes rank 0's NCCL unique ID from the key
// init_process_group uses. It prints one line: what it saw.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/musterhq/muster/kv"
	"github.com/musterhq/muster/tcpstore"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rank, world := os.Getenv("RANK"), os.Getenv("WORLD_SIZE")
	n, _ := strconv.Atoi(world)
	addr := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
	// Without an agent store rank 0 would bind MASTER_PORT here: say
	// whether it could. Without one, only rank 0 tries: another rank's try
	// could hold the port at the moment rank 0 binds it, and then no rank
	// would host the store.
	agentStore := os.Getenv("TORCHELASTIC_USE_AGENT_STORE") == "True"
	bind := "free"
	var l net.Listener
	var err error
	if !agentStore && rank != "0" {
		bind = "unprobed"
	} else if l, err = net.Listen("tcp", addr); err != nil {
		bind = "held"
	} else if !agentStore {
		// No agent store: rank 0 hosts one, as torch's rank 0 does.
		srv := tcpstore.NewServer(l, nil, nil)
		srv.Use(kv.NewMemoryWith(tcpstore.Limits).Space("job"))
		srv.Start()
		defer srv.Close()
	} else {
		l.Close()
	}
	c, err := tcpstore.Dial(ctx, addr)
	if err != nil {
		fail(err)
	}
	defer c.Close()
	joined, err := c.Add("init/", 1)
	if err != nil {
		fail(err)
	}
	// A key left by an earlier round would show here.
	stale, err := c.Check("/round-mark")
	if err != nil {
		fail(err)
	}
	const idKey = "/default_pg/0//cuda//0"
	if rank == "0" {
		id := make([]byte, 128)
		rand.Read(id)
		if err := c.Set(idKey, id); err != nil {
			fail(err)
		}
	}
	if err := c.Wait(ctx, idKey); err != nil {
		fail(err)
	}
	id, err := c.Get(idKey)
	if err != nil {
		fail(err)
	}
	// Everyone counts in, then waits for the last, as torch's store barrier.
	if last, err := c.Add("/barrier", 1); err != nil {
		fail(err)
	} else if last == int64(n) {
		if err := c.Set("/barrier:last", []byte("1")); err != nil {
			fail(err)
		}
	}
	if err := c.Wait(ctx, "/barrier:last"); err != nil {
		fail(err)
	}
	if err := c.Set("/round-mark", []byte(rank)); err != nil {
		fail(err)
	}
	fmt.Printf("restart %s rank %s of %s use-agent-store %s port %s %s joined %d stale %t id %s\n",
		os.Getenv("TORCHELASTIC_RESTART_COUNT"), rank, world, os.Getenv("TORCHELASTIC_USE_AGENT_STORE"),
		os.Getenv("MASTER_PORT"), bind, joined, stale, hex.EncodeToString(id[:8]))
	// Whoever hosts the store stays until every rank is done with it.
	if done, err := c.Add("/done", 1); err != nil {
		fail(err)
	} else if done == int64(n) {
		if err := c.Set("/done:last", []byte("1")); err != nil {
			fail(err)
		}
	}
	if err := c.Wait(ctx, "/done:last"); err != nil {
		fail(err)
	}
	if rank != "0" {
		c.Add("/left", 1)
	} else {
		for left := int64(0); left < int64(n-1) && ctx.Err() == nil; time.Sleep(5 * time.Millisecond) {
			left, _ = c.Add("/left", 0)
		}
	}
	if os.Getenv("FAIL_RANK") == rank && os.Getenv("TORCHELASTIC_RESTART_COUNT") == "0" {
		os.Exit(3)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "torchclient:", err)
	os.Exit(1)
}
