// Package jobhistory keeps a store's finished jobs, bounded by count and
// age, in a bbolt file that outlives the store's process. Every change is a
// HistoryCommand applied in order by Apply, the one place the history
// changes: the store proposes commands (a job ended, jobs expired), and the
// same Apply can later be a replicated log's state machine.
package jobhistory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"

	"github.com/musterhq/muster/paths"
)

// Defaults for Config's bounds, and the file's name in the data directory.
const (
	DefaultMaxJobs = 1000
	DefaultMaxAge  = 7 * 24 * time.Hour
	FileName       = "jobs.db"
)

// Bounds on what one record keeps and on commands waiting to be applied.
const (
	maxRecordBytes = 1 << 20 // a larger record on disk is skipped
	// recordBudget is what trimRecord shortens a record to: 1000 jobs take
	// at most about 256 MB however large their specs and node lists.
	recordBudget   = 256 << 10
	maxStderrLines = 20
	maxStderrBytes = 4 << 10
	queueLength    = 4096
	// lockWait is how long Open waits for another process's lock on the
	// file: a store that was just stopped releases it at once.
	lockWait    = 2 * time.Second
	closeWait   = 5 * time.Second
	maxEnvBytes = 64 << 10
)

var jobsBucket = []byte("jobs")

// Config configures a History.
type Config struct {
	Logger *zap.Logger
	// Dir is the data directory holding the file (FileName); "" keeps the
	// history in memory only.
	Dir string
	// MaxJobs and MaxAge bound the jobs kept: the oldest ended go first.
	// 0 takes DefaultMaxJobs and DefaultMaxAge.
	MaxJobs int
	MaxAge  time.Duration
	// Now is the clock expiry reads; time.Now when nil.
	Now func() time.Time
}

// History is the finished jobs: in memory for reading, in its file for
// the next incarnation of the store. Its methods are safe for concurrent use.
type History struct {
	cfg  Config
	log  *zap.Logger
	path string   // the file; "" in memory only
	db   *bolt.DB // nil in memory only

	mu    sync.RWMutex
	jobs  map[string]*musterv1.JobStatus
	order []*musterv1.JobStatus // by end time, oldest first

	qmu    sync.Mutex
	queue  chan *musterv1.HistoryCommand
	closed bool
	done   chan struct{} // closed when run ends
}

// Open loads the history from cfg.Dir and starts applying proposed
// commands. It always returns a history: a file that cannot be used is
// named in the log and the history is kept in memory; a corrupt one is
// moved aside (FileName.corrupt-TIME) and a new one begun.
func Open(cfg Config) *History {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxJobs <= 0 {
		cfg.MaxJobs = DefaultMaxJobs
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &History{cfg: cfg, log: cfg.Logger, jobs: map[string]*musterv1.JobStatus{},
		queue: make(chan *musterv1.HistoryCommand, queueLength), done: make(chan struct{})}
	if cfg.Dir != "" {
		h.openFile(filepath.Join(cfg.Dir, FileName))
	}
	// Jobs that aged past the bound while no store ran go now.
	h.Apply(h.expireCommand())
	h.log.Info("job history", zap.String("file", h.path), zap.Int("jobs", len(h.order)),
		zap.Int("max-jobs", cfg.MaxJobs), zap.Duration("max-age", cfg.MaxAge))
	go h.run()
	return h
}

// openFile opens path and loads its records, moving a corrupt file aside.
func (h *History) openFile(path string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		h.log.Error("job history kept in memory only: cannot make its directory", zap.String("file", path), zap.Error(err))
		return
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		h.log.Info("job history file missing: beginning it", zap.String("file", path))
	}
	db, err := h.load(path)
	if err == nil {
		h.path, h.db = path, db
		return
	}
	if errors.Is(err, berrors.ErrTimeout) {
		h.log.Error("job history kept in memory only: another process holds its file", zap.String("file", path))
		return
	}
	if !corrupt(err) {
		h.log.Error("job history kept in memory only: cannot open its file", zap.String("file", path), zap.Error(err))
		return
	}
	aside := path + ".corrupt-" + h.cfg.Now().UTC().Format("20060102T150405Z")
	if rerr := os.Rename(path, aside); rerr != nil {
		h.log.Error("job history kept in memory only: its file is corrupt and cannot be moved aside",
			zap.String("file", path), zap.NamedError("corruption", err), zap.Error(rerr))
		return
	}
	h.log.Error("job history file is corrupt: moved aside, starting empty", zap.String("file", path),
		zap.String("moved-to", aside), zap.Error(err))
	clear(h.jobs)
	h.order = nil
	if db, err = h.load(path); err != nil {
		h.log.Error("job history kept in memory only: cannot begin a new file", zap.String("file", path), zap.Error(err))
		return
	}
	h.path, h.db = path, db
}

// load opens the file, checks it and reads its records into memory. A
// record that does not decode is skipped (and named); a file bbolt finds
// inconsistent is an error.
func (h *History) load(path string) (db *bolt.DB, err error) {
	// A damaged file must not crash the store: bbolt panics on some bad
	// pages, and a page past a truncated file's end faults (SIGBUS).
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", berrors.ErrInvalid, r)
		}
		if err != nil && db != nil {
			db.Close()
			db = nil
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	if err != nil {
		if strings.Contains(err.Error(), "file size too small") {
			err = fmt.Errorf("%w: %w", berrors.ErrInvalid, err)
		}
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		// Its pages must all lie within the file (bbolt's own Check runs
		// in a goroutine of its own, where a panic cannot be recovered).
		if fi, err := os.Stat(path); err != nil {
			return err
		} else if fi.Size() < tx.Size() {
			return fmt.Errorf("%w: the file holds %d bytes, its pages %d", berrors.ErrInvalid, fi.Size(), tx.Size())
		}
		b, err := tx.CreateBucketIfNotExists(jobsBucket)
		if err != nil {
			return err
		}
		var bad [][]byte
		err = b.ForEach(func(k, v []byte) error {
			st, err := decodeRecord(k, v)
			if err != nil {
				h.log.Warn("job history: record skipped", zap.String("file", path), zap.ByteString("key", k), zap.Error(err))
				bad = append(bad, slices.Clone(k))
				return nil
			}
			h.insertLocked(st)
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range bad {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return db, err
}

// corrupt says whether err opening the file is the file's own fault.
func corrupt(err error) bool {
	return errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrVersionMismatch) || errors.Is(err, berrors.ErrChecksum)
}

// decodeRecord is one record of the file: a JobStatus of an ended job,
// keyed by its ID.
func decodeRecord(key, value []byte) (*musterv1.JobStatus, error) {
	if len(value) > maxRecordBytes {
		return nil, fmt.Errorf("record of %d bytes, more than %d", len(value), maxRecordBytes)
	}
	st := &musterv1.JobStatus{}
	if err := proto.Unmarshal(value, st); err != nil {
		return nil, err
	}
	if err := checkRecord(st); err != nil {
		return nil, err
	}
	if st.JobId != string(key) {
		return nil, fmt.Errorf("record of job %q under key %q", st.JobId, key)
	}
	return st, nil
}

// checkRecord accepts only the record of an ended job.
func checkRecord(st *musterv1.JobStatus) error {
	switch {
	case st.GetJobId() == "":
		return errors.New("record without a job ID")
	case st.GetEndedUnixMs() <= 0:
		return fmt.Errorf("job %s: record without an end time", st.JobId)
	}
	if st.GetState().Ended() {
		return nil
	}
	return fmt.Errorf("job %s: record of a job in state %s, not ended", st.JobId, st.GetState())
}

// Path is the history's file, "" when it is kept in memory only.
func (h *History) Path() string { return h.path }

// Propose queues cmd to be applied in order, without waiting: the store
// calls it under its lock. A full queue drops cmd, naming its job.
func (h *History) Propose(cmd *musterv1.HistoryCommand) {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	if h.closed {
		return
	}
	select {
	case h.queue <- cmd:
	default:
		h.log.Error("job history: record dropped, too many waiting to be written", zap.String("job", cmd.GetFinished().GetJobId()))
	}
}

// run applies proposed commands in order, and expires old jobs from time
// to time, until Close closes the queue: what it holds then is applied.
func (h *History) run() {
	defer close(h.done)
	tick := time.NewTicker(min(max(h.cfg.MaxAge/10, time.Second), time.Hour))
	defer tick.Stop()
	for {
		select {
		case cmd, ok := <-h.queue:
			if !ok {
				return
			}
			if err := h.Apply(cmd); err != nil {
				h.log.Error("job history: command refused", zap.Error(err))
			}
		case <-tick.C:
			h.Apply(h.expireCommand())
		}
	}
}

func (h *History) expireCommand() *musterv1.HistoryCommand {
	return &musterv1.HistoryCommand{Command: &musterv1.HistoryCommand_Expire{Expire: &musterv1.HistoryExpire{
		EndedBeforeUnixMs: h.cfg.Now().Add(-h.cfg.MaxAge).UnixMilli()}}}
}

// Apply applies one command: the one place the history changes. Its
// result depends on the command and the history alone (not on the clock),
// so that every replica applying the same commands holds the same jobs. A
// failed write to the file is logged; the history in memory changes all
// the same.
func (h *History) Apply(cmd *musterv1.HistoryCommand) error {
	var put *musterv1.JobStatus
	var forget []*musterv1.JobStatus
	h.mu.Lock()
	switch c := cmd.GetCommand().(type) {
	case *musterv1.HistoryCommand_Finished:
		if err := checkRecord(c.Finished); err != nil {
			h.mu.Unlock()
			return err
		}
		put = trimRecord(c.Finished)
		if old := h.jobs[put.JobId]; old != nil {
			h.removeLocked(old)
		}
		h.insertLocked(put)
		forget = h.boundLocked(0)
	case *musterv1.HistoryCommand_Expire:
		forget = h.boundLocked(c.Expire.GetEndedBeforeUnixMs())
	default:
		h.mu.Unlock()
		return fmt.Errorf("unknown history command %T", c)
	}
	h.mu.Unlock()
	if h.db == nil || (put == nil && len(forget) == 0) {
		return nil
	}
	// Only run writes the file, so it may do so outside h.mu.
	err := h.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(jobsBucket)
		for _, st := range forget {
			if err := b.Delete([]byte(st.JobId)); err != nil {
				return err
			}
		}
		if put == nil || slices.Contains(forget, put) {
			return nil
		}
		v, err := proto.Marshal(put)
		if err != nil {
			return err
		}
		return b.Put([]byte(put.JobId), v)
	})
	if err != nil {
		h.log.Error("job history: writing its file failed", zap.String("file", h.path), zap.Error(err))
	} else if put != nil {
		h.log.Debug("job recorded", zap.String("job", put.JobId), zap.String("file", h.path), zap.Int("forgotten", len(forget)))
	}
	return nil
}

// trimRecord is what the history keeps of a job: no environment values
// (secrets often travel there), a short stderr tail, and within
// recordBudget: the spec's host lists go first, then older rounds, then the
// node lists, then the command (marked trimmed).
func trimRecord(st *musterv1.JobStatus) *musterv1.JobStatus {
	st = trimDetail(st)
	over := func() bool { return proto.Size(st) > recordBudget }
	if !over() {
		return st
	}
	st.Trimmed = true
	if spec := st.GetSpec(); spec != nil {
		spec.Hosts, spec.Exclude = nil, nil
	}
	for over() && len(st.RoundNodes) > 1 {
		st.RoundNodes = st.RoundNodes[1:]
	}
	if over() {
		st.RoundNodes, st.Nodes = nil, nil
	}
	if over() && st.Spec != nil {
		st.Spec.Argv, st.Spec.Env, st.Spec.LogDir, st.Spec.Workdir = st.Spec.Argv[:min(len(st.Spec.Argv), 1)], nil, nil, nil
		if len(st.Spec.Argv) == 1 && len(st.Spec.Argv[0]) > 4096 {
			st.Spec.Argv[0] = st.Spec.Argv[0][:4096]
		}
	}
	if over() && st.Failure != nil {
		st.Failure.StderrTail, st.Failure.Error, st.Failure.NodeLoss = nil, "", nil
	}
	if over() {
		// Only the summary could still be this large: a reason given to cancel.
		st.Summary = st.Summary[:min(len(st.Summary), 4096)]
	}
	return st
}

// trimDetail leaves out environment values and all but a short stderr tail.
func trimDetail(st *musterv1.JobStatus) *musterv1.JobStatus {
	st = proto.CloneOf(st)
	if spec := st.GetSpec(); spec != nil {
		n := 0
		for i, kv := range spec.Env {
			name, _, _ := strings.Cut(string(kv), "=")
			spec.Env[i] = []byte(name)
			n += len(name)
			if n > maxEnvBytes {
				spec.Env = spec.Env[:i]
				break
			}
		}
	}
	if f := st.GetFailure(); f != nil {
		tail := f.StderrTail[max(0, len(f.StderrTail)-maxStderrLines):]
		for n := 0; len(tail) > 0; tail = tail[1:] {
			if n = totalLen(tail); n <= maxStderrBytes {
				break
			}
		}
		f.StderrTail = tail
	}
	return st
}

func totalLen(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return n
}

// compareEnd orders jobs by end time, then ID.
func compareEnd(a, b *musterv1.JobStatus) int {
	if a.EndedUnixMs != b.EndedUnixMs {
		if a.EndedUnixMs < b.EndedUnixMs {
			return -1
		}
		return 1
	}
	return strings.Compare(a.JobId, b.JobId)
}

// boundLocked forgets the jobs that ended before endedBefore (Unix ms),
// then the oldest past MaxJobs, and returns them.
func (h *History) boundLocked(endedBefore int64) []*musterv1.JobStatus {
	var forget []*musterv1.JobStatus
	for len(h.order) > 0 && (h.order[0].EndedUnixMs < endedBefore || len(h.order) > h.cfg.MaxJobs) {
		forget = append(forget, h.order[0])
		h.removeLocked(h.order[0])
	}
	return forget
}

func (h *History) insertLocked(st *musterv1.JobStatus) {
	h.jobs[st.JobId] = st
	i, _ := slices.BinarySearchFunc(h.order, st, compareEnd)
	h.order = slices.Insert(h.order, i, st)
}

func (h *History) removeLocked(st *musterv1.JobStatus) {
	delete(h.jobs, st.JobId)
	if i, found := slices.BinarySearchFunc(h.order, st, compareEnd); found {
		h.order = slices.Delete(h.order, i, i+1)
	}
}

// List is the jobs kept, oldest ended first. They must not be changed.
func (h *History) List() []*musterv1.JobStatus {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return slices.Clone(h.order)
}

// Get is the job kept under id, or nil. It must not be changed.
func (h *History) Get(id string) *musterv1.JobStatus {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.jobs[id]
}

// Close applies what was proposed before it, within a bounded wait, and
// closes the file.
func (h *History) Close() error {
	h.qmu.Lock()
	if h.closed {
		h.qmu.Unlock()
		<-h.done
		return nil
	}
	h.closed = true
	close(h.queue)
	h.qmu.Unlock()
	select {
	case <-h.done:
	case <-time.After(closeWait):
		h.log.Error("job history: records still waiting to be written at close", zap.String("file", h.path))
		return fmt.Errorf("job history %s: records still waiting after %s", h.path, closeWait)
	}
	if h.db != nil {
		return h.db.Close()
	}
	return nil
}

// DefaultDir is where an agent hosting a store keeps its data: systemd's
// StateDirectory when the unit has one, /var/lib/muster as root, else this
// user's state directory ($XDG_STATE_HOME/muster, ~/.local/state/muster).
func DefaultDir() string { return paths.OS().StateDir() }
