package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A node checks its health before it starts a round's workers: its GPUs
// (GPUHealth), the agent's --health-check command and the job's. The
// result goes to the store, which leaves a node that failed out of the
// job's rounds; the start fails with it.

// GPUHealth checks the GPUs a node offers (gpu.Checker): a note when they
// are fine ("no GPUs"), an error naming what is wrong otherwise.
type GPUHealth interface {
	Check() (note string, err error)
}

// Names of the checks, as NodeHealth.check gives them.
const (
	checkGPUs       = "gpus"
	checkAgentCmd   = "agent command"
	checkJobCmd     = "job command"
	healthTailBytes = 1024
	healthTailLines = 5
	healthCmdQuote  = 200
)

// healthReportTimeout bounds the report of a check to the store.
const healthReportTimeout = 10 * time.Second

// health runs the node's checks for asg, the first failure ending them.
func (a *Agent) health(ctx context.Context, asg *musterv1.Assignment, cred *syscall.Credential, workdir string) *musterv1.NodeHealth {
	h := &musterv1.NodeHealth{JobId: asg.GetJobId()}
	done := func(check string, err error) *musterv1.NodeHealth {
		h.Ok, h.Check, h.Reason, h.CheckedUnixMs = false, check, validText(err.Error()), time.Now().UnixMilli()
		return h
	}
	checks := []string{}
	if a.cfg.GPUHealth != nil {
		note, err := a.cfg.GPUHealth.Check()
		if err != nil {
			return done(checkGPUs, err)
		}
		checks = append(checks, checkGPUs+" ("+note+")")
	}
	env := a.healthEnviron(asg, cred)
	if cmd := a.cfg.HealthCommand; cmd != "" {
		if err := runHealthCommand(ctx, cmd, a.cfg.HealthTimeout, nil, "", env); err != nil {
			return done(checkAgentCmd, err)
		}
		checks = append(checks, checkAgentCmd)
	}
	if cmd := asg.GetSpec().GetHealthCheck(); len(cmd) > 0 {
		timeout := time.Duration(asg.GetSpec().GetHealthCheckTimeoutMs()) * time.Millisecond
		if err := runHealthCommand(ctx, string(cmd), timeout, cred, workdir, env); err != nil {
			return done(checkJobCmd, err)
		}
		checks = append(checks, checkJobCmd)
	}
	h.Ok, h.Check, h.CheckedUnixMs = true, strings.Join(checks, ", "), time.Now().UnixMilli()
	return h
}

// healthEnviron is a health command's environment: the workers' base, the
// job's ID, the node's name and the round's GPUs here.
func (a *Agent) healthEnviron(asg *musterv1.Assignment, cred *syscall.Credential) []string {
	env := minimalEnviron(a.cfg.Environ)
	if cred != nil {
		env = userEnviron(a.cfg.Environ, cred.Uid)
	}
	gpus := make([]string, len(asg.GetGpus()))
	for i, g := range asg.GetGpus() {
		gpus[i] = strconv.Itoa(int(g))
	}
	return append(env, "MUSTER_JOB_ID="+asg.GetJobId(), "MUSTER_NODE_NAME="+a.cfg.Name,
		"CUDA_VISIBLE_DEVICES="+strings.Join(gpus, ","))
}

// runHealthCommand runs cmd with /bin/sh -c, as cred when given, and fails
// unless it exits 0 within timeout (jobspec.DefaultHealthTimeout when 0);
// the error keeps the last lines of its output. Its whole process group is
// killed when the time is up.
func runHealthCommand(ctx context.Context, cmd string, timeout time.Duration, cred *syscall.Credential, dir string, env []string) error {
	if timeout <= 0 {
		timeout = jobspec.DefaultHealthTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	c.Dir, c.Env = dir, env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	// Output a child keeps open does not hold the check past its kill.
	c.WaitDelay = time.Second
	out := &tailBuffer{max: 16 * healthTailBytes}
	c.Stdout, c.Stderr = out, out
	start := time.Now()
	err := c.Run()
	// The reason quotes the command, but not all of a long one.
	if len(cmd) > healthCmdQuote {
		cmd = cmd[:healthCmdQuote] + "..."
	}
	took := time.Since(start).Round(time.Millisecond)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("%q did not exit within %s", cmd, timeout)
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		err = fmt.Errorf("%q exited with code %d after %s", cmd, ee.ExitCode(), took)
	default:
		err = fmt.Errorf("%q: %w", cmd, err)
	}
	if t := out.lines(healthTailLines, healthTailBytes); t != "" {
		err = fmt.Errorf("%w: %s", err, t)
	}
	return err
}

// tailBuffer keeps the last bytes written to it, at most max.
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = b.buf[over:]
	}
	return len(p), nil
}

// lines is the last n non-empty lines, at most limit bytes, joined with " | ".
func (b *tailBuffer) lines(n, limit int) string {
	var keep []string
	for _, l := range bytes.Split(b.buf, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			keep = append(keep, string(l))
		}
	}
	s := strings.Join(keep[max(len(keep)-n, 0):], " | ")
	if len(s) > limit {
		s = "..." + s[len(s)-limit:]
	}
	return validText(s)
}

// reportHealth tells the store how the node's check went. A report that
// does not arrive leaves the start's failure to say it.
func (a *Agent) reportHealth(asg *musterv1.Assignment, h *musterv1.NodeHealth) {
	ctx, cancel := context.WithTimeout(a.sendCtx, healthReportTimeout)
	defer cancel()
	_, err := a.client.ReportHealth(ctx, &musterv1.ReportHealthRequest{Session: a.sessionID(),
		JobId: asg.GetJobId(), RoundId: asg.GetRoundId(), Health: h})
	log := a.log.With(zap.String("job", asg.GetJobId()), zap.Bool("ok", h.GetOk()), zap.String("check", h.GetCheck()),
		zap.String("reason", h.GetReason()))
	switch {
	case err != nil:
		log.Warn("health check not reported", zap.Error(err))
	case !h.GetOk():
		log.Warn("node failed its health check")
	default:
		log.Debug("node healthy")
	}
}

// startHealthCheck gives the health check of job's start a context that a
// stop of the job ends (endHealthCheck); done forgets it.
func (a *Agent) startHealthCheck(job string) (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancel(a.ctx)
	a.qmu.Lock()
	a.checking[job] = cancel
	a.qmu.Unlock()
	return ctx, func() {
		a.qmu.Lock()
		delete(a.checking, job)
		a.qmu.Unlock()
		cancel()
	}
}

// endHealthCheck ends the health check of job's start, if one runs: the
// job is stopping.
func (a *Agent) endHealthCheck(job string) {
	a.qmu.Lock()
	cancel := a.checking[job]
	a.qmu.Unlock()
	if cancel != nil {
		cancel()
	}
}
