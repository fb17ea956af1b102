package agent

import (
	"net/netip"

	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/ncclnet"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"go.uber.org/zap"
)

// minimalEnviron is what a job that does not inherit the agent's environment
// still needs to find programs and a home.
func minimalEnviron(env []string) []string {
	var out []string
	for _, name := range []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "SHELL"} {
		if v, ok := envprop.Lookup(env, name); ok {
			out = append(out, name+"="+v)
		}
	}
	return out
}

// detectNCCLNet finds NCCL's network variables for this node; the NCCL
// version is read from the library once per agent, and only for GPU jobs.
func (a *Agent) detectNCCLNet(asg *musterv1.Assignment, base, user []string) ncclnet.Result {
	master, err := netip.ParseAddr(asg.GetMasterAddr())
	if err != nil {
		return ncclnet.Result{}
	}
	version := 0
	if len(asg.GetGpus()) > 0 && a.cfg.NCCLVersion != nil {
		a.ncclOnce.Do(func() { a.ncclVersion, _ = a.cfg.NCCLVersion() })
		version = a.ncclVersion
	}
	userVars := ncclnet.UserVars(append(append([]string(nil), base...), user...))
	net, err := ncclnet.Detect(ncclnet.Options{SysRoot: a.cfg.SysRoot, MasterAddr: master, NCCLVersion: version, UserEnv: userVars})
	if err != nil {
		a.log.Warn("nccl network detection failed", zap.Error(err))
	}
	return net
}

// byteStrings is a JobSpec's byte fields as Go strings, which hold any bytes.
func byteStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
