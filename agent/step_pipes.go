package agent

import (
	"github.com/musterhq/muster/supervise"
)

// makePipes makes each worker's output pipes (pseudo-terminals for those
// --tty names) and, with an MPI job's PMI service, its PMI socket, and finds
// its program. A worker whose program is not found never starts: its exit
// is queued, its pipes end at once.
func (js *jobStart) makePipes() error {
	// Workers of one command share their program: it is looked up once,
	// not once a worker (a stat of each PATH directory).
	type found struct {
		path string
		err  error
	}
	programs := map[string]found{}
	for _, w := range js.workers {
		outR, outW, err := js.outputStream(w, 0)
		if err != nil {
			return err
		}
		errR, errW, err := js.outputStream(w, 1)
		if err != nil {
			outR.Close()
			outW.Close()
			return err
		}
		w.readers = [2]*supervise.Reader{outR, errR}
		ws := w.plan.spec
		key := ws.argv[0] + "\x00" + ws.dir + "\x00" + searchPath(ws.env)
		p, ok := programs[key]
		if !ok {
			p.path, p.err = lookPath(ws.argv[0], ws.dir, ws.env)
			programs[key] = p
		}
		path, err := p.path, p.err
		if err != nil {
			w.exit <- startError(ws.argv[0], "", err)
			outW.Close()
			errW.Close()
			if ws.stdin != nil {
				ws.stdin.Close()
			}
			continue
		}
		w.path = path
		js.started = append(js.started, w)
		sw := supervise.Worker{Path: path, Argv: ws.argv, Env: ws.env, Dir: ws.dir, Cred: ws.cred, Stdin: ws.stdin, Stdout: outW, Stderr: errW,
			CPUs: w.plan.binding.cpus, Memory: w.plan.binding.memory}
		if w.cgroup != nil {
			sw.Cgroup = w.cgroup.Dir()
		}
		js.spec.Workers = append(js.spec.Workers, sw)
		if js.mpi != nil {
			if w.pmi, err = newPMIConn(); err != nil {
				return err
			}
			js.spec.Workers[len(js.spec.Workers)-1].PMI = w.pmi.worker
		}
	}
	return nil
}

// closePipes closes the workers' pipes and PMI sockets: the agent's ends,
// read to their end, once the job is over, and both ends of workers that
// will not start (the shim closes its ends once it has them).
func (js *jobStart) closePipes() {
	for _, w := range js.workers {
		for _, r := range w.readers {
			if r != nil {
				r.Close()
			}
		}
		if w.pmi != nil {
			w.pmi.close()
			w.pmi = nil
		}
	}
	for _, w := range js.spec.Workers {
		w.Stdout.Close()
		w.Stderr.Close()
	}
}
