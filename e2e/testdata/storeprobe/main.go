// Command storeprobe is a client of a job's TCPStore that is not one of the
// job's ranks: it connects to HOST:PORT, sets a key and reads it back, and
// prints "ok", or "refused" and why.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/musterhq/muster/tcpstore"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := tcpstore.Dial(ctx, os.Args[1])
	if err == nil {
		defer c.Close()
		if err = c.Set("probe", []byte("x")); err == nil {
			_, err = c.Get("probe")
		}
	}
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	fmt.Println("ok")
}
