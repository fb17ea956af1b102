package agent

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/hostfile"
)

// writeRoster writes the roster's files, on nodes whose assignment carries
// it: every node of a small job, node rank 0 of a large one.
func (js *jobStart) writeRoster() error {
	asg := js.asg
	if !hasRoster(asg) {
		return nil
	}
	addrs := asg.GetNodeAddrs()
	hosts := make([]hostfile.Host, len(addrs))
	for i, addr := range addrs {
		hosts[i] = hostfile.Host{Name: addr, Slots: int(asg.GetNodeSlots()[i])}
	}
	hf := filepath.Join(js.files.dir, "hostfile")
	err := asUser(js.cred, func() error {
		return writeFile(hf, func(w io.Writer) error { return hostfile.Emit(w, hostfile.OpenMPI, hosts) })
	})
	if err == nil && !envprop.NodeAddrsFit(addrs) {
		js.addrsFile = filepath.Join(js.files.dir, "node_addrs")
		err = asUser(js.cred, func() error {
			return writeFile(js.addrsFile, func(w io.Writer) error {
				_, err := io.WriteString(w, envprop.JoinNodeAddrs(addrs)+"\n")
				return err
			})
		})
		addrs = nil
	}
	if err != nil {
		return fmt.Errorf("job hostfile: %w", err)
	}
	js.hostfile, js.addrs = hf, addrs
	return nil
}
