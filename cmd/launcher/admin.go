package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// clusterAction runs fn with a connection to --cluster, which the cluster
// commands require, and a bounded context.
func clusterAction(fn func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		addr, err := clusterAddr(c)
		if err != nil {
			return err
		}
		if addr == "" {
			return cmdline.Usagef(c, "%s needs --cluster HOST:PORT (or MUSTER_CLUSTER): no agent serves this machine, and it asks a running cluster's store", c.Command.Name)
		}
		sec, err := clusterSecurity(c, addr)
		if err != nil {
			return cli.Exit(err.Error(), cmdline.UsageExitCode)
		}
		cl, err := storeclient.Dial(addr, sec)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
		Name:        "nodes",
		Usage:       "list the cluster's nodes: gossip state (alive, dead, left; leaving, not-registered), GPUs total and free, jobs, last health check (needs --cluster)",
		Description: "Asks the store given by --cluster HOST:PORT (or MUSTER_CLUSTER); the embedded default has no cluster to list.",
		ArgsUsage:   " ",
		Flags:       clusterFlags(true),
		Action: clusterAction(func(ctx context.Context, _ *cli.Context, cl *storeclient.Client) error {
			resp, err := cl.ListNodes(ctx, &musterv1.ListNodesRequest{})
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tADDR\tRANK\tSTATE\tGPUS\tFREE\tJOBS\tHEALTH")
			now := time.Now()
			for _, n := range resp.Nodes {
				rank := "-"
				if n.Node.Rank >= 0 {
					rank = fmt.Sprint(n.Node.Rank)
				}
				state := nodeState(n)
				jobs := strings.Join(n.Jobs, ",")
				if jobs == "" {
					jobs = "-"
				}
				total := len(n.Node.Gpus)
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", n.Node.Name, n.Node.Addr, rank, state, total, total-len(n.BusyGpus), jobs,
					nodeHealth(n.GetHealth(), now))
			}
			return w.Flush()
		}),
	}
}

// nodeState is a node's STATE: its gossip state ("-" on a store without
// gossip), marked "leaving" while its agent shuts down, and
// "not-registered" for a member gossip knows that this store does not.
func nodeState(n *musterv1.NodeStatus) string {
	state := n.GetGossip()
	if state == "" {
		state = "-"
	}
	switch {
	case n.GetLeaving():
		state += ",leaving"
	case n.GetNotRegistered() && state == "alive":
		state += ",not-registered"
	}
	return state
}

func jobsCommand() *cli.Command {
	return &cli.Command{
		Name:        "jobs",
		Usage:       "list the cluster's jobs (needs --cluster)",
		Description: "Asks the store given by --cluster HOST:PORT (or MUSTER_CLUSTER); the embedded default has no cluster to list.",
		ArgsUsage:   " ",
		Flags:       clusterFlags(true),
		Action: clusterAction(func(ctx context.Context, _ *cli.Context, cl *storeclient.Client) error {
			resp, err := cl.ListJobs(ctx, &musterv1.ListJobsRequest{})
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "JOB\tSTATE\tEXIT\tUSER\tNODES\tCOMMAND")
			for _, j := range resp.Jobs {
				state := strings.ToLower(strings.TrimPrefix(j.State.String(), "JOB_STATE_"))
				exit := "-" // not ended yet
				switch j.State {
				case musterv1.JobState_JOB_STATE_SUCCEEDED, musterv1.JobState_JOB_STATE_FAILED, musterv1.JobState_JOB_STATE_CANCELLED:
					exit = fmt.Sprint(j.ExitCode)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", j.JobId, state, exit, owner(j.GetOwner()),
					strings.Join(j.Nodes, ","), bytes.Join(j.Spec.GetArgv(), []byte(" ")))
			}
			return w.Flush()
		}),
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
				_, err := cl.Cancel(ctx, &musterv1.CancelRequest{JobId: id, Force: c.Bool("force"), Reason: "cancelled by launcher cancel", ExitCode: 143})
				if err != nil {
					return fmt.Errorf("%s: %s", id, storeclient.ErrorMessage(err))
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
			&cli.StringFlag{Name: "dir", Value: "muster-certs", Usage: "where the CA (ca.pem, ca-key.pem) is kept and store.pem and store-key.pem are written"},
			&cli.DurationFlag{Name: "valid", Value: 365 * 24 * time.Hour, Usage: "how long the certificates are valid"},
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

// owner names who a job runs as: its submitter, or "-" for the cluster
// operator's jobs, which run as the agents' own users.
func owner(id *musterv1.Identity) string {
	switch {
	case id == nil:
		return "(operator)" // submitted with the cluster token
	case id.GetUser() != "":
		return id.GetUser()
	}
	return fmt.Sprint(id.GetUid())
}

// nodeHealth is a node's HEALTH: "-" before its first check, else "ok" or
// "failed", how long ago, and the checks made, or the one that failed and
// why.
func nodeHealth(h *musterv1.NodeHealth, now time.Time) string {
	if h == nil {
		return "-"
	}
	ago := now.Sub(time.UnixMilli(h.GetCheckedUnixMs())).Round(time.Second)
	if h.GetOk() {
		return fmt.Sprintf("ok (%s ago): %s", ago, h.GetCheck())
	}
	return fmt.Sprintf("failed (%s ago, job %s): %s: %s", ago, h.GetJobId(), h.GetCheck(), h.GetReason())
}
