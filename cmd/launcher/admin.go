package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/listing"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// clusterAction runs fn with a connection to --cluster, which the cluster
// commands require, and a bounded context.
func clusterAction(fn func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error) cli.ActionFunc {
	return clusterActionWithin(10*time.Second, fn)
}

// clusterActionWithin is clusterAction with a context bounded by timeout, or
// not at all for 0 (a stream that lasts as long as the job).
func clusterActionWithin(timeout time.Duration, fn func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		addrs, err := clusterAddrs(c)
		if err != nil {
			return err
		}
		addr := ""
		if len(addrs) > 0 {
			addr = addrs[0]
		}
		if addr == "" {
			return cmdline.Usagef(c, "%s needs --cluster HOST:PORT (or MUSTER_CLUSTER): no agent serves this machine, and it asks a running cluster's store", c.Command.Name)
		}
		sec, err := clusterSecurity(c, addr)
		if err != nil {
			return cli.Exit(err.Error(), cmdline.UsageExitCode)
		}
		var replicas []string
		if len(addrs) > 1 {
			replicas = addrs
		}
		cl, err := storeclient.DialCluster(addr, replicas, sec)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		defer cl.Close()
		ctx, cancel := context.WithCancel(context.Background())
		if timeout > 0 {
			ctx, cancel = context.WithTimeout(context.Background(), timeout)
		}
		if c.Bool("watch") {
			// A watch lasts until interrupted.
			cancel()
			ctx, cancel = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		}
		defer cancel()
		if err := fn(ctx, c, cl); err != nil {
			if ec, ok := err.(cli.ExitCoder); ok {
				return ec
			}
			return cli.Exit(c.Command.Name+": "+storeclient.ErrorMessage(err), 1)
		}
		return nil
	}
}

func nodesCommand() *cli.Command {
	return &cli.Command{
		Name: "nodes",
		Usage: "list the cluster's nodes: gossip state (alive, dead, left; leaving, not-registered; cordoned, draining, drained), " +
			"GPUs total and free, jobs, last health check (needs --cluster)",
		Description: "Asks the store given by --cluster HOST:PORT (or MUSTER_CLUSTER); the embedded default has no cluster to list.",
		ArgsUsage:   " ",
		Flags:       append(clusterFlags(true), outputFlag(string(listing.Table), "print a table, a wide one, or a NodeList")),
		Before:      checkOutput,
		Action: clusterAction(func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error {
			if c.NArg() > 0 {
				return cmdline.Usagef(c, "unknown nodes command %q: list the nodes, or cordon, drain or uncordon NODE", c.Args().First())
			}
			f, _ := outputFormat(c)
			resp, err := cl.ListNodes(ctx, &musterv1.ListNodesRequest{})
			if err != nil {
				return err
			}
			return listing.WriteNodes(c.App.Writer, f, listing.Nodes(resp.GetNodes()))
		}),
		Subcommands: []*cli.Command{
			scheduleCommand("cordon", musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED,
				"take no new job's round on NODE; the jobs running there go on, and may restart there"),
			scheduleCommand("drain", musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED,
				"take no round on NODE: the jobs running there go on, and their next rounds form elsewhere; nothing is stopped"),
			scheduleCommand("uncordon", musterv1.NodeSchedule_NODE_SCHEDULE_UNSPECIFIED,
				"let NODE take rounds again, after cordon or drain"),
		},
	}
}

// scheduleCommand is `launcher nodes cordon|drain|uncordon NODE...`: the
// cluster operator's alone.
func scheduleCommand(name string, sched musterv1.NodeSchedule, usage string) *cli.Command {
	return &cli.Command{
		Name:        name,
		Usage:       usage + " (the cluster operator's; needs --cluster)",
		Description: "Asks the store given by --cluster HOST:PORT (or MUSTER_CLUSTER). The store keeps it by node name until uncordon, whatever the node's agent does.",
		ArgsUsage:   "NODE...",
		Flags:       clusterFlags(true),
		Action: clusterAction(func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error {
			if c.NArg() == 0 {
				return cmdline.Usagef(c, "name at least one node (launcher nodes lists them)")
			}
			for _, node := range c.Args().Slice() {
				resp, err := cl.SetNodeSchedule(ctx, &musterv1.SetNodeScheduleRequest{Node: node, Schedule: sched})
				if err != nil {
					return fmt.Errorf("%s: %s", node, storeclient.ErrorMessage(err))
				}
				fmt.Fprintln(c.App.Writer, listing.DescribeSchedule(node, name, resp))
			}
			return nil
		}),
	}
}

// checkOutput refuses a bad -o before the command asks anything.
func checkOutput(c *cli.Context) error {
	_, err := outputFormat(c)
	return err
}

func jobsCommand() *cli.Command {
	return &cli.Command{
		Name:  "jobs",
		Usage: "list the cluster's jobs, running and finished (the store's history), show JOB in full, or follow their changes with --watch (needs --cluster)",
		Description: "Asks the store given by --cluster HOST:PORT (or MUSTER_CLUSTER); the embedded default has no cluster to list.\n" +
			"Times are RFC 3339, in UTC. A user other than the cluster operator sees their own jobs only.",
		ArgsUsage: "[JOB]",
		Flags: append(clusterFlags(true), outputFlag(string(listing.Table), "print a table, a wide one, or a JobList"),
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "list the jobs, then each job again when it changes, until interrupted " +
				"(with -o json one Job object a line)"}),
		Before: checkOutput,
		Action: clusterAction(func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error {
			f, _ := outputFormat(c)
			if c.NArg() > 0 {
				return showJob(ctx, c, cl)
			}
			if c.Bool("watch") {
				return watchJobs(ctx, c, cl, f)
			}
			resp, err := cl.ListJobs(ctx, &musterv1.ListJobsRequest{})
			if err != nil {
				return err
			}
			return listing.WriteJobs(c.App.Writer, f, listing.Jobs(resp.GetJobs()))
		}),
	}
}

// watchJobs prints the jobs' changes until ctx ends (an interrupt).
func watchJobs(ctx context.Context, c *cli.Context, cl *storeclient.Client, f listing.Format) error {
	stream, err := cl.WatchJobs(ctx, &musterv1.WatchJobsRequest{})
	if err != nil {
		return err
	}
	w := listing.NewJobWatch(c.App.Writer, f)
	for {
		st, err := stream.Recv()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if err := w.Write(listing.JobOf(st)); err != nil {
			return cli.Exit("jobs: "+err.Error(), 1)
		}
	}
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:        "cancel",
		Usage:       "stop jobs of a cluster: SIGTERM, then SIGKILL after their kill timeout (needs --cluster)",
		Description: "Asks the store given by --cluster HOST:PORT (or MUSTER_CLUSTER). A job on the embedded default stops with Ctrl-C in its launcher.",
		ArgsUsage:   "JOB...",
		Flags:       append(clusterFlags(true), &cli.BoolFlag{Name: "force", Usage: "kill at once"}),
		Action: clusterAction(func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error {
			if c.NArg() == 0 {
				return cmdline.Usagef(c, "name at least one job (launcher jobs lists them)")
			}
			for _, id := range c.Args().Slice() {
				resp, err := cl.Cancel(ctx, &musterv1.CancelRequest{JobId: id, Force: c.Bool("force"), Reason: "cancelled by launcher cancel", ExitCode: 143})
				if err != nil {
					return fmt.Errorf("%s: %s", id, storeclient.ErrorMessage(err))
				}
				if st := resp.GetEnded(); st.Ended() {
					fmt.Fprintf(os.Stderr, "launcher: job %s had already ended (%s): nothing to cancel\n", id, listing.StateName(st))
				}
			}
			return nil
		}),
	}
}

func certsCommand() *cli.Command {
	return &cli.Command{
		Name:      "certs",
		Usage:     "make a store certificate for the given host names and addresses, signed by the CA in --dir (made there first when it has none)",
		ArgsUsage: "HOST...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: "muster-certs", Usage: "`DIR` where the CA (ca.pem, ca-key.pem) is kept and store.pem and store-key.pem are written"},
			&cli.DurationFlag{Name: "valid", Value: 365 * 24 * time.Hour, Usage: "how long the certificates are valid (`DURATION`)"},
		},
		Action: func(c *cli.Context) error {
			files, err := security.GenerateCerts(c.String("dir"), c.Args().Slice(), c.Duration("valid"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			fmt.Printf("agent --tls-cert %s --tls-key %s ...\nlauncher run --tls-ca %s ...\n", files.Cert, files.Key, files.CA)
			return nil
		},
	}
}
