// Command kvworker is a worker for the end-to-end tests: it sets a key of
// its job, waits for every rank at a barrier, and prints what all ranks set.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster/jobkv"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rank := os.Getenv("RANK")
	n, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	st, err := jobkv.Dial()
	if err != nil {
		fail(err)
	}
	defer st.Close()
	if err := st.Set(ctx, "k-"+rank, []byte("v"+rank)); err != nil {
		fail(err)
	}
	if err := st.Barrier(ctx, "all-set", rank, n); err != nil {
		fail(err)
	}
	var vals []string
	for r := 0; r < n; r++ {
		v, err := st.Get(ctx, fmt.Sprint("k-", r))
		if err != nil {
			fail(err)
		}
		vals = append(vals, string(v))
	}
	fmt.Printf("kv %s\n", strings.Join(vals, ","))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kvworker:", err)
	os.Exit(1)
}
