// Command storeprobe is a client of a job's TCPStore that is not one of the
// job's ranks: it connects to HOST:PORT, sets a key and reads it back, and
// prints "ok", or "refused" and why.
//
//	storeprobe HOST:PORT             set "probe" and read it back
//	storeprobe HOST:PORT get KEY     print "ok VALUE"
//	storeprobe HOST:PORT set KEY VAL set KEY to VAL
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
	args := os.Args[1:]
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: storeprobe HOST:PORT [get KEY | set KEY VALUE]")
		os.Exit(2)
	}
	c, err := tcpstore.Dial(ctx, args[0])
	var got []byte
	if err == nil {
		defer c.Close()
		switch {
		case len(args) == 3 && args[1] == "get":
			got, err = c.Get(args[2])
		case len(args) == 4 && args[1] == "set":
			err = c.Set(args[2], []byte(args[3]))
		default:
			if err = c.Set("probe", []byte("x")); err == nil {
				_, err = c.Get("probe")
			}
		}
	}
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	if got != nil {
		fmt.Printf("ok %s\n", got)
		return
	}
	fmt.Println("ok")
}
