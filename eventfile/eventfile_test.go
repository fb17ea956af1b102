package eventfile

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestLine(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	now := func() time.Time { return at }
	stamped := at.UnixMicro()
	for _, tt := range []struct {
		name string
		ev   *musterv1.JobEvent
		want string // the line, "" for none
	}{
		{"waiting", &musterv1.JobEvent{JobId: "j-1", TimeUnixUs: stamped, Event: &musterv1.JobEvent_Waiting{Waiting: &musterv1.WaitingForNodes{
			Wanted: 3, Ready: 1, ReadyNodes: []string{"a"}}}},
			`{"type":"waiting","time":"2026-01-02T03:04:05.123456Z","job":"j-1","round":0,"wanted":3,"ready":1,"least":0,"readyNodes":["a"],"unusable":[]}`},
		{"round started", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_RoundStarted{RoundStarted: &musterv1.RoundStarted{
			Round: 1, RoundId: "r-1", Nodes: []string{"a", "c"}, Nproc: 2, WorldSize: 4, MasterAddr: "10.0.0.1", MasterPort: 29500,
			UniqueIdSha256: "ab", RestartCount: 1}}},
			`{"type":"round_started","time":"2026-01-02T03:04:05.123456Z","job":"j-1","round":1,"roundId":"r-1","nodes":["a","c"],"nprocPerNode":2,"worldSize":4,"masterAddr":"10.0.0.1","masterPort":29500,"uniqueIdSha256":"ab","restartCount":1}`},
		{"worker started", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Started{Started: &musterv1.WorkerStarted{Rank: 3, LocalRank: 1, Node: "b", Pid: 42}}},
			`{"type":"worker_started","time":"2026-01-02T03:04:05.123456Z","job":"j-1","rank":3,"localRank":1,"node":"b","pid":42,"binding":null}`},
		{"worker started with a binding", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Started{Started: &musterv1.WorkerStarted{Rank: 2, LocalRank: 2, Node: "a", Pid: 43,
			Binding: &musterv1.WorkerBinding{Gpus: []int32{2}, NumaNodes: []int32{0}, Cpus: "0-55,112-167", Nic: "mlx5_2", NicBy: "switch"}}}},
			`{"type":"worker_started","time":"2026-01-02T03:04:05.123456Z","job":"j-1","rank":2,"localRank":2,"node":"a","pid":43,` +
				`"binding":{"gpus":[2],"numaNodes":[0],"mode":"none","cpus":"0-55,112-167","cpusNote":"","applied":false,"threads":0,"memoryNodes":[],"nic":"mlx5_2","nicBy":"switch","unknown":""}}`},
		{"worker bound to cores", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Started{Started: &musterv1.WorkerStarted{Rank: 2, LocalRank: 2, Node: "a", Pid: 43,
			Binding: &musterv1.WorkerBinding{Gpus: []int32{2}, NumaNodes: []int32{0}, Mode: "cores", Cpus: "28-41,140-153", Applied: true, Threads: 14, MemoryNodes: []int32{0}}}}},
			`{"type":"worker_started","time":"2026-01-02T03:04:05.123456Z","job":"j-1","rank":2,"localRank":2,"node":"a","pid":43,` +
				`"binding":{"gpus":[2],"numaNodes":[0],"mode":"cores","cpus":"28-41,140-153","cpusNote":"","applied":true,"threads":14,"memoryNodes":[0],"nic":"","nicBy":"","unknown":""}}`},
		{"worker started, binding unknown", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Started{Started: &musterv1.WorkerStarted{Rank: 0, Node: "a", Pid: 44,
			Binding: &musterv1.WorkerBinding{Unknown: "its CPUs are not in sysfs"}}}},
			`{"type":"worker_started","time":"2026-01-02T03:04:05.123456Z","job":"j-1","rank":0,"localRank":0,"node":"a","pid":44,` +
				`"binding":{"gpus":[],"numaNodes":[],"mode":"none","cpus":"","cpusNote":"","applied":false,"threads":0,"memoryNodes":[],"nic":"","nicBy":"","unknown":"its CPUs are not in sysfs"}}`},
		{"worker exited with a code", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Exited{Exited: &musterv1.WorkerExited{Rank: 3, Node: "b", ExitCode: 0}}},
			`{"type":"worker_exited","time":"2026-01-02T03:04:05.123456Z","job":"j-1","rank":3,"localRank":0,"node":"b","exitCode":0,"signal":0,"signalName":"","stopped":false,"error":""}`},
		{"worker killed", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Exited{Exited: &musterv1.WorkerExited{Rank: 0, Node: "a", Signal: 9, Stopped: true}}},
			`{"type":"worker_exited","time":"2026-01-02T03:04:05.123456Z","job":"j-1","rank":0,"localRank":0,"node":"a","exitCode":null,"signal":9,"signalName":"SIGKILL","stopped":true,"error":""}`},
		{"node lost", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_NodeLost{NodeLost: &musterv1.NodeLoss{Node: "b",
			Signal: musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, Observer: "a", SilentMs: 1200, ConfirmedBy: []string{"c"},
			WorkersGoneByUnixMs: 1_700_000_000_000}}},
			`{"type":"node_lost","time":"2026-01-02T03:04:05.123456Z","job":"j-1","node":"b","detectedBy":"gossip_dead","cause":"no gossip ack for 1.2 s","observer":"a","silentMs":1200,"confirmedBy":["c"],"workersGoneBy":"2023-11-14T22:13:20.000000Z"}`},
		{"restart", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Restarting{Restarting: &musterv1.RoundRestarting{
			Round: 0, Reason: "node b lost", RestartCount: 1, MaxRestarts: 2, Counted: true}}},
			`{"type":"restart","time":"2026-01-02T03:04:05.123456Z","job":"j-1","round":0,"reason":"node b lost","restartCount":1,"maxRestarts":2,"counted":true}`},
		{"ended", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Finished{Finished: &musterv1.JobFinished{
			State: musterv1.JobState_JOB_STATE_FAILED, ExitCode: 3, Summary: "rank 1 exited with code 3",
			Failure: &musterv1.WorkerExited{Rank: 1, Node: "a", ExitCode: 3}}}},
			`{"type":"ended","time":"2026-01-02T03:04:05.123456Z","job":"j-1","state":"failed","exitCode":3,"summary":"rank 1 exited with code 3","failedRank":1,"failedNode":"a","hang":null,"pythonError":null}`},
		{"ended for a hang", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Finished{Finished: &musterv1.JobFinished{
			State: musterv1.JobState_JOB_STATE_FAILED, ExitCode: 134, Summary: "rank 2 hung",
			Failure: &musterv1.WorkerExited{Rank: 2, Node: "b", Signal: 6, Hang: &musterv1.WorkerHang{SilentMs: 10_040, TimeoutMs: 10_000,
				Waiting: []int32{0, 1, 3}, WaitingCount: 3, Verdict: &musterv1.HangVerdict{Evidence: musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS,
					Culprits: []int32{2}, Launched: 20, Collective: &musterv1.Collective{Communicator: "5974ff3706582d81", Op: "AllReduce", Seq: 21}}}}}}},
			`{"type":"ended","time":"2026-01-02T03:04:05.123456Z","job":"j-1","state":"failed","exitCode":134,"summary":"rank 2 hung","failedRank":2,"failedNode":"b",` +
				`"hang":{"evidence":"nccl_ras","culprits":[2],"cannotTell":false,"silent":[],"resolutionMs":0,"waiting":[0,1,3],"waitingCount":3,` +
				`"collective":{"op":"AllReduce","seq":21,"processGroup":"","processGroupName":"","communicator":"5974ff3706582d81"},"silentMs":10040,"timeoutMs":10000,"flightRecorder":""},"pythonError":null}`},
		{"succeeded", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Finished{Finished: &musterv1.JobFinished{State: musterv1.JobState_JOB_STATE_SUCCEEDED}}},
			`{"type":"ended","time":"2026-01-02T03:04:05.123456Z","job":"j-1","state":"succeeded","exitCode":0,"summary":"","failedRank":null,"failedNode":"","hang":null,"pythonError":null}`},
		{"output is not written", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_Output{Output: &musterv1.Output{Data: []byte("x\n")}}}, ""},
		{"state is not written", &musterv1.JobEvent{JobId: "j-1", Event: &musterv1.JobEvent_State{State: musterv1.JobState_JOB_STATE_RUNNING}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			line := Line(tt.ev, now)
			if tt.want == "" {
				if line != nil {
					t.Fatalf("a line for %v: %v", tt.ev, line)
				}
				return
			}
			b, err := json.Marshal(line)
			if err != nil || string(b) != tt.want {
				t.Fatalf("\n%s, %v\nwant\n%s", b, err, tt.want)
			}
		})
	}
}

// Two writers append to one file (two launchers' jobs): every line is
// whole, and each writer's lines are in its order.
func TestWriterAppends(t *testing.T) {
	name := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(name, []byte(`{"type":"earlier"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 500
	var wg sync.WaitGroup
	for _, job := range []string{"j-a", "j-b"} {
		w, err := Open(name)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Submitted(job, &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 1})
			for i := range n {
				w.Event(&musterv1.JobEvent{JobId: job, Event: &musterv1.JobEvent_Started{Started: &musterv1.WorkerStarted{Rank: int32(i)}}})
			}
			if err := w.Err(); err != nil {
				t.Error(err)
			}
			w.Close()
		}()
	}
	wg.Wait()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	next := map[string]int{}
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var h struct {
			Header
			Rank int `json:"rank"`
		}
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		count[h.Type]++
		if h.Type == TypeWorkerStarted {
			if h.Rank != next[h.Job] {
				t.Fatalf("job %s: rank %d after %d", h.Job, h.Rank, next[h.Job]-1)
			}
			next[h.Job]++
		}
		if h.Type != "earlier" && !strings.HasSuffix(h.Time, "Z") {
			t.Fatalf("time %q", h.Time)
		}
	}
	if count["earlier"] != 1 || count[TypeSubmitted] != 2 || count[TypeWorkerStarted] != 2*n {
		t.Fatalf("lines by type %v", count)
	}
}

func TestOpenNamesTheFlag(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir", "f"))
	if err == nil || !strings.HasPrefix(err.Error(), "--events: ") {
		t.Fatalf("%v", err)
	}
}

// Root's launcher opens nothing another user put at the --events path first,
// and never waits in open() on a FIFO nobody reads.
func TestOpenRefusesWhatAnotherUserPlanted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the other user's files are made as another uid")
	}
	const hostile = 65533
	dir := t.TempDir()
	os.Chmod(dir, os.ModeSticky|0o777) // as /tmp
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, nil, 0o600)
	plant := func(path string, make func(string) error) {
		if err := make(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(path, hostile, hostile); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name  string
		setup func(path string)
		want  string // "" when it opens
	}{
		{"new file", func(string) {}, ""},
		{"a device of root's", func(p string) { os.Symlink("/dev/null", p) }, ""},
		{"FIFO of another user", func(p string) { plant(p, func(p string) error { return syscall.Mkfifo(p, 0o666) }) }, "is a FIFO nobody reads"},
		{"link of another user", func(p string) { plant(p, func(p string) error { return os.Symlink(secret, p) }) }, "is a symbolic link of uid 65533, not uid 0 or root"},
		{"file of another user", func(p string) { plant(p, func(p string) error { return os.WriteFile(p, nil, 0o666) }) }, "belongs to uid 65533, not uid 0"},
		{"socket of another user", func(p string) {
			plant(p, func(p string) error {
				l, err := net.Listen("unix", p)
				if err == nil {
					t.Cleanup(func() { l.Close() })
				}
				return err
			})
		}, "is a socket, not a regular file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			tt.setup(name)
			done := make(chan error, 1)
			go func() {
				w, err := Open(name)
				if err == nil {
					w.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Open is still waiting in open()")
			}
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), "--events: open "+name+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want --events naming %s and saying %q", err, name, tt.want)
			}
		})
	}
}

// A FIFO of the user's own that a reader holds open is theirs to give.
func TestOpenOwnFIFOWithReader(t *testing.T) {
	name := filepath.Join(t.TempDir(), "events")
	if err := syscall.Mkfifo(name, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	w.Submitted("j-1", &musterv1.JobSpec{Nnodes: 1})
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.Contains(line, `"type":"submitted"`) {
		t.Fatalf("read %q, %v", line, err)
	}
}
