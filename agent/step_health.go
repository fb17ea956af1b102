package agent

import (
	"fmt"
)

// checkHealth is the start's health step: the node's checks, reported to
// the store; a failure fails the start.
func (js *jobStart) checkHealth() error {
	a, asg := js.a, js.asg
	ctx, done := a.startHealthCheck(asg.GetJobId())
	defer done()
	h := a.health(ctx, asg, js.cred, js.workdir)
	if ctx.Err() != nil && a.ctx.Err() == nil {
		// A stop came: the check's end says nothing of the node.
		return errStopping
	}
	a.reportHealth(asg, h)
	if !h.GetOk() {
		return fmt.Errorf("node %s failed its health check (%s): %s", a.cfg.Name, h.GetCheck(), h.GetReason())
	}
	return nil
}
