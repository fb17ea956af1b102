// Command tcpstoreload plays N torch ranks joining at once on a TCPStore
// server, torch's or muster's, for the TCPStore benchmark. One run is the
// join pattern of torch's store-based barrier: every client connects
// (connect, VALIDATE, PING), ADDs 1 to PREFIX/count; the client whose ADD
// returns N SETs PREFIX/last, and every client WAITs on PREFIX/last.
//
//	tcpstoreload [-addr HOST:PORT] -clients N [-dialers C] [-key PREFIX] [-runs R] [-json]
//
// It prints one line per run, "clients=N connect_ms=A total_ms=B" (A: from
// the start until every client has connected; B: until every WAIT has
// returned), then the median total. Every connection stays open until its
// run ends. Runs use fresh keys: PREFIX/RUN/count and PREFIX/RUN/last.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/musterhq/muster/tcpstore"
)

func main() {
	addr := flag.String("addr", defaultAddr(), "server HOST:PORT (default MASTER_ADDR:MASTER_PORT)")
	clients := flag.Int("clients", 1000, "clients that join in each run")
	dialers := flag.Int("dialers", 256, "connection attempts in flight at once")
	key := flag.String("key", "load", "key prefix")
	runs := flag.Int("runs", 1, "runs, each with fresh keys")
	timeout := flag.Duration("timeout", 5*time.Minute, "limit on each run")
	asJSON := flag.Bool("json", false, "print JSON lines")
	flag.Parse()
	if err := load(*addr, *clients, *dialers, *key, *runs, *timeout, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "tcpstoreload:", err)
		os.Exit(1)
	}
}

func defaultAddr() string {
	host, port := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")
	if host == "" || port == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// checkFDLimit makes sure every client's socket fits under RLIMIT_NOFILE,
// with room for the process's own files.
func checkFDLimit(clients int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	if need := uint64(clients) + 64; l.Cur < need {
		return fmt.Errorf("RLIMIT_NOFILE is %d (hard %d), %d clients need %d: raise it (ulimit -n)", l.Cur, l.Max, clients, need)
	}
	return nil
}

type result struct {
	Run       int     `json:"run"`
	Clients   int     `json:"clients"`
	ConnectMS float64 `json:"connect_ms"`
	TotalMS   float64 `json:"total_ms"`
}

func load(addr string, clients, dialers int, key string, runs int, timeout time.Duration, asJSON bool) error {
	if addr == "" {
		return errors.New("no -addr and no MASTER_ADDR/MASTER_PORT")
	}
	if clients < 1 || dialers < 1 || runs < 1 {
		return errors.New("-clients, -dialers and -runs must be at least 1")
	}
	if err := checkFDLimit(clients); err != nil {
		return err
	}
	var totals []float64
	for r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		res, err := run(ctx, addr, clients, dialers, key+"/"+strconv.Itoa(r))
		cancel()
		if err != nil {
			return fmt.Errorf("run %d: %w", r, err)
		}
		res.Run = r
		totals = append(totals, res.TotalMS)
		if asJSON {
			b, _ := json.Marshal(res)
			fmt.Println(string(b))
		} else {
			fmt.Printf("clients=%d connect_ms=%.1f total_ms=%.1f\n", res.Clients, res.ConnectMS, res.TotalMS)
		}
	}
	slices.Sort(totals)
	median := totals[len(totals)/2]
	if len(totals)%2 == 0 {
		median = (totals[len(totals)/2-1] + median) / 2
	}
	if asJSON {
		fmt.Printf("{\"clients\":%d,\"runs\":%d,\"median_total_ms\":%.1f}\n", clients, runs, median)
	} else {
		fmt.Printf("clients=%d runs=%d median_total_ms=%.1f\n", clients, runs, median)
	}
	return nil
}

// run is one join of n clients under prefix; connections close when it ends.
func run(ctx context.Context, addr string, n, dialers int, prefix string) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	count, last := prefix+"/count", prefix+"/last"
	var (
		mu        sync.Mutex
		conns     []*tcpstore.Client
		connected int
		firstErr  error
	)
	allConnected := make(chan time.Duration, 1)
	sem := make(chan struct{}, dialers)
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := join(ctx, addr, sem, n, count, last, func(c *tcpstore.Client) {
				mu.Lock()
				defer mu.Unlock()
				conns = append(conns, c)
				if connected++; connected == n {
					allConnected <- time.Since(start)
				}
			})
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel() // one failed rank fails the run, as in torch
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := time.Since(start)
	for _, c := range conns {
		c.Close()
	}
	if firstErr != nil {
		return result{}, firstErr
	}
	return result{Clients: n, ConnectMS: ms(<-allConnected), TotalMS: ms(total)}, nil
}

// join is one rank: connect, count itself in, and wait for the last one.
func join(ctx context.Context, addr string, sem chan struct{}, n int, count, last string, connected func(*tcpstore.Client)) error {
	sem <- struct{}{}
	c, err := tcpstore.Dial(ctx, addr)
	<-sem
	if err != nil {
		return err
	}
	connected(c)
	v, err := c.Add(count, 1)
	if err != nil {
		return err
	}
	if v == int64(n) {
		if err := c.Set(last, []byte("1")); err != nil {
			return err
		}
	}
	return c.Wait(ctx, last)
}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())/100) / 10 }
