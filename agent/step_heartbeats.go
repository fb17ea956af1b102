package agent

import (
	"fmt"

	"github.com/musterhq/muster/envprop"
)

// makeHeartbeats makes each worker's heartbeat file, with a hang timeout.
func (js *jobStart) makeHeartbeats() error {
	var err error
	if js.hang, err = newHangWatch(js.a.log, js.asg.GetSpec(), js.workers, js.cred); err != nil {
		return fmt.Errorf("heartbeat files: %w", err)
	}
	if js.hang != nil && len(js.plans) > 0 {
		js.hang.round, js.hang.ras = js.asg.GetRoundId(), envprop.RASAddr(js.plans[0].spec.env)
	}
	return nil
}
