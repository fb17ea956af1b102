// Package openmpi runs Open MPI programs under muster (--mpi openmpi):
// Open MPI's own mpirun runs on node rank 0 with muster as its remote shell.
// Each node runs one worker: node rank 0's is mpi-launch, which runs mpirun;
// every other node's is mpi-daemon, which waits in the job's KV for the
// command line mpirun's rsh (the agent binary again) posts for its node,
// runs it (Open MPI's orted) and exits with its code. No ssh is involved.
//
// Only the job's own workers hold its job token, so only they can post a
// launch line; a daemon runs it as the job's user, in the job's worker slot:
// it gets no privilege the job does not have.
package openmpi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/jobkv"
)

// The hidden commands of the agent and launcher binaries that run an Open
// MPI job, as argv[1].
const (
	LaunchCommand = "mpi-launch"
	DaemonCommand = "mpi-daemon"
	RSHCommand    = "rsh"
)

// Variables of an Open MPI job's workers beyond envprop's: the mpirun to run
// (the user may name another, e.g. mpirun.openmpi) and, for rsh, the
// hostfile that lists the job's nodes.
const (
	MpirunVar   = "MUSTER_MPIRUN"
	HostfileVar = "MUSTER_OPENMPI_HOSTFILE"
)

// HostfileName is the Open MPI hostfile node rank 0 writes in the job's
// directory.
const HostfileName = "openmpi-hostfile"

// startWait bounds how long rsh waits for a node's daemon to take its line.
const startWait = 60 * time.Second

// Keys in the job's KV, per round: a restarted job's daemons never see the
// last round's lines.
func launchKey(round, node string) string  { return "openmpi/" + round + "/launch/" + node }
func startedKey(round, node string) string { return "openmpi/" + round + "/started/" + node }
func doneKey(round string) string          { return "openmpi/" + round + "/done" }

// RunIfRequested runs one of the hidden commands and exits when this
// process was started as one (by the agent for a worker, or by mpirun);
// otherwise it returns at once. The agent and launcher binaries call it
// first in main: either may be the agent that plans the workers.
func RunIfRequested() {
	if len(os.Args) < 2 || os.Getenv(envprop.RoundID) == "" {
		return
	}
	var code int
	switch os.Args[1] {
	case LaunchCommand:
		code = runLaunch(os.Args[2:])
	case DaemonCommand:
		code = runDaemon(os.Args[2:])
	case RSHCommand:
		code = runRSH(os.Args[2:])
	default:
		return
	}
	os.Exit(code)
}

// Node is what node rank 0's worker needs to plan mpirun.
type Node struct {
	Self  string   // the agent binary
	Dir   string   // the job's directory on this node
	Names []string // the job's nodes by node rank
	Slots int      // MPI ranks per node
	Env   []string // the worker's environment
	Argv  []string // the user's program
	Root  bool     // the worker runs as root
}

// Argv is the worker command of a node of an Open MPI job: mpi-daemon, or
// on node rank 0 mpi-launch running mpirun, for which it writes the hostfile.
func Argv(nodeRank int, n Node) ([]string, error) {
	if nodeRank != 0 {
		return []string{n.Self, DaemonCommand, n.Dir}, nil
	}
	hf := filepath.Join(n.Dir, HostfileName)
	if err := writeHostfile(hf, n.Names, n.Slots); err != nil {
		return nil, err
	}
	mpirun := "mpirun"
	if v, ok := envprop.Lookup(n.Env, MpirunVar); ok && v != "" {
		mpirun = v
	}
	argv := []string{n.Self, LaunchCommand, n.Dir, "--", mpirun,
		"-np", strconv.Itoa(len(n.Names) * n.Slots), "--hostfile", hf,
		// plm rsh, whatever the environment says (OMPI_MCA_plm=isolated
		// keeps mpirun to its own node): the agents are its remote shell.
		"--mca", "plm", "rsh", "--mca", "plm_rsh_agent", n.Self + " " + RSHCommand}
	// mpirun's bootstrap and MPI traffic take the interface muster picked
	// for NCCL: on multi-NIC hosts Open MPI may try one that does not route.
	if v, ok := envprop.Lookup(n.Env, "NCCL_SOCKET_IFNAME"); ok && v != "" && !strings.ContainsAny(v, ",^=") {
		argv = append(argv, "--mca", "oob_tcp_if_include", v, "--mca", "btl_tcp_if_include", v)
	}
	if n.Root {
		argv = append(argv, "--allow-run-as-root")
	}
	return append(argv, n.Argv...), nil
}

// writeHostfile lists the nodes with their slots; node rank 0 under this
// machine's host name, so that mpirun runs its ranks here itself.
func writeHostfile(path string, names []string, slots int) error {
	var b strings.Builder
	for i, name := range names {
		if i == 0 {
			if h, err := os.Hostname(); err == nil {
				name = h
			}
		}
		fmt.Fprintf(&b, "%s slots=%d\n", name, slots)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// runLaunch runs mpirun (argv after "--"), passing on SIGTERM and SIGINT,
// then tells the daemons that it ended and exits with mpirun's code.
func runLaunch(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "muster mpi-launch: usage: mpi-launch JOBDIR -- MPIRUN...")
		return 2
	}
	dir, args := args[0], args[2:]
	round := os.Getenv(envprop.RoundID)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = sessionDirEnv(os.Environ(), dir)
	// rsh reads the job's nodes from the hostfile.
	for i, a := range args {
		if a == "--hostfile" && i+1 < len(args) {
			cmd.Env = append(cmd.Env, HostfileVar+"="+args[i+1])
		}
	}
	code := runChild(cmd, "mpirun")
	store, err := jobkv.Dial()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = store.Set(ctx, doneKey(round), []byte(strconv.Itoa(code)))
		cancel()
		store.Close()
	}
	if err != nil {
		// The daemons still end: the job's end stops them.
		fmt.Fprintf(os.Stderr, "muster mpi-launch: telling the other nodes that mpirun ended: %v\n", err)
	}
	return code
}

// runRSH is mpirun's remote shell: it posts the command line for host in
// the job's KV and returns once that node's daemon took it. Exiting while
// orted runs is fine for mpirun; exiting non-zero fails the launch.
func runRSH(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "muster rsh: usage: rsh HOST COMMAND...")
		return 2
	}
	host, line := args[0], strings.Join(args[1:], " ")
	round := os.Getenv(envprop.RoundID)
	names, err := readHostfile(os.Getenv(HostfileVar))
	if err != nil {
		fmt.Fprintf(os.Stderr, "muster rsh: the job's nodes: %v\n", err)
		return 1
	}
	// Node rank 0 is local to mpirun, which never asks rsh for it.
	if !slices.Contains(names[1:], host) {
		fmt.Fprintf(os.Stderr, "muster rsh: %q is not a node of this job (its others: %s)\n", host, strings.Join(names[1:], ", "))
		return 1
	}
	store, err := jobkv.Dial()
	if err != nil {
		fmt.Fprintf(os.Stderr, "muster rsh: %v\n", err)
		return 1
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	if err := store.Set(ctx, launchKey(round, host), []byte(line)); err != nil {
		fmt.Fprintf(os.Stderr, "muster rsh: posting the launch for node %s: %v\n", host, err)
		return 1
	}
	if _, err := waitKey(ctx, store, startedKey(round, host)); err != nil {
		fmt.Fprintf(os.Stderr, "muster rsh: node %s's daemon did not start the launch within %s: %v\n", host, startWait, err)
		return 1
	}
	return 0
}

// runDaemon waits for its node's launch line or for mpirun's end, whichever
// first, and runs the line.
func runDaemon(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "muster mpi-daemon: usage: mpi-daemon JOBDIR")
		return 2
	}
	round, node := os.Getenv(envprop.RoundID), os.Getenv(envprop.NodeName)
	store, err := jobkv.Dial()
	if err != nil {
		fmt.Fprintf(os.Stderr, "muster mpi-daemon: %v\n", err)
		return 1
	}
	defer store.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	type got struct {
		key string
		val []byte
		err error
	}
	first := make(chan got, 2)
	for _, key := range []string{launchKey(round, node), doneKey(round)} {
		go func() {
			v, err := waitKey(ctx, store, key)
			first <- got{key, v, err}
		}()
	}
	g := <-first
	if g.err != nil {
		if ctx.Err() != nil {
			return 0 // stopped before any launch: nothing ran here
		}
		fmt.Fprintf(os.Stderr, "muster mpi-daemon: %v\n", g.err)
		return 1
	}
	// A line posted after mpirun ended would find nobody to talk to.
	if _, err := store.Get(ctx, doneKey(round)); err == nil || g.key == doneKey(round) {
		return 0
	}
	cancel()
	if err := store.Set(context.Background(), startedKey(round, node), nil); err != nil {
		fmt.Fprintf(os.Stderr, "muster mpi-daemon: %v\n", err)
		return 1
	}
	cmd := exec.Command("/bin/sh", "-c", string(g.val))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = sessionDirEnv(os.Environ(), args[0])
	return runChild(cmd, "orted")
}

// sessionDirEnv puts Open MPI's session directory of mpirun or of a node's
// orted in the job's directory on its node, which the job's end removes
// whatever way it ends, a lost node's included; in /tmp a killed orted's
// would stay. Open MPI takes it from TMPDIR on each node (its MCA settings
// would reach the other nodes with node rank 0's path), and the ranks
// inherit it: their TMPDIR is the job's directory too. A user's own
// setting of Open MPI's session directory stands.
func sessionDirEnv(env []string, dir string) []string {
	for _, name := range []string{"tmpdir_base", "local_tmpdir_base", "remote_tmpdir_base"} {
		if _, ok := envprop.Lookup(env, "OMPI_MCA_orte_"+name); ok {
			return env
		}
	}
	return append(env, "TMPDIR="+dir)
}

// waitKey waits for key until ctx ends, asking again whenever the store's
// own bound on one wait passes.
func waitKey(ctx context.Context, store *jobkv.Client, key string) ([]byte, error) {
	for {
		v, err := store.Wait(ctx, key)
		if err == nil || ctx.Err() != nil {
			return v, err
		}
		if errors.Is(err, jobkv.ErrKeyNotFound) || strings.Contains(err.Error(), "deadline") {
			continue
		}
		// The store may be restarting: try again shortly.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// runChild runs cmd, passing SIGTERM and SIGINT on, and returns its exit
// code, 128+N for signal N.
func runChild(cmd *exec.Cmd, what string) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "muster: starting %s: %v\n", what, err)
		return 127
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "muster: %s: %v\n", what, err)
		return 1
	}
	return 0
}

// readHostfile returns the host names of a hostfile writeHostfile wrote.
func readHostfile(path string) ([]string, error) {
	if path == "" {
		return nil, fmt.Errorf("%s is not set: rsh runs under mpi-launch", HostfileVar)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return hostNames(f)
}

func hostNames(r io.Reader) ([]string, error) {
	var names []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 {
			names = append(names, fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, errors.New("no nodes in the hostfile")
	}
	return names, nil
}
