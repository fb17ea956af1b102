package ranklog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/paths"
)

// Defaults of Config.
const (
	// DefaultMaxBytes bounds a node's kept output, unless a tenth of the
	// file system it is on is less (as journald bounds its own).
	DefaultMaxBytes = 1 << 30
	DefaultMaxAge   = 7 * 24 * time.Hour
)

// Bounds on what one call of Read's send carries.
const (
	batchRecords = 256
	batchBytes   = 512 << 10
)

// Config configures a Store.
type Config struct {
	// Dir holds a directory per job, a file per rank in it.
	Dir string
	// MaxBytes bounds the files' total size: the oldest ended jobs go first;
	// output of running jobs past it is not kept. 0: DefaultMaxBytes, or a
	// tenth of Dir's file system when that is less.
	MaxBytes int64
	// MaxAge bounds how long an ended job's output is kept. 0: DefaultMaxAge.
	MaxAge time.Duration
}

// ErrNotKept says the node keeps no output of a job: it ran none of its
// ranks, or the output went with age or size.
var ErrNotKept = errors.New("no output kept")

// Store is one node's kept output.
type Store struct {
	cfg Config
	log *zap.Logger

	mu    sync.Mutex
	total int64 // bytes of every file
	// full says the running jobs alone fill the bound: appends do not look
	// for ended jobs to drop again until a job ends.
	full bool
	live map[string]*liveJob
	now  func() time.Time
}

// liveJob is a job whose ranks may still write here.
type liveJob struct {
	writers int
	changed chan struct{} // closed and replaced at each append
}

// Open makes cfg.Dir if need be (only this user may enter it: the output
// is its jobs' users' to read, through the store) and drops what is past
// the bounds.
func Open(log *zap.Logger, cfg Config) (*Store, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("rank logs: %w", err)
	}
	// Only this user's own directory: no one else may put a link there.
	fi, err := os.Lstat(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("rank logs: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("rank logs: %s is not a directory of this agent's user", cfg.Dir)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("rank logs: %w", err)
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
		var st syscall.Statfs_t
		if syscall.Statfs(cfg.Dir, &st) == nil {
			if tenth := int64(st.Blocks) * st.Bsize / 10; tenth > 0 && tenth < cfg.MaxBytes {
				cfg.MaxBytes = tenth
			}
		}
	}
	s := &Store{cfg: cfg, log: log, live: map[string]*liveJob{}, now: time.Now}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(0)
	return s, nil
}

// MaxBytes is the bound on the files' total size in force.
func (s *Store) MaxBytes() int64 { return s.cfg.MaxBytes }

func validJob(job string) error {
	if job == "" || len(job) > 64 || strings.ContainsAny(job, "/\x00") || job == "." || job == ".." {
		return fmt.Errorf("job id %q is not one a store mints", job)
	}
	return nil
}

func (s *Store) rankPath(job string, rank int) string {
	return filepath.Join(s.cfg.Dir, job, "rank-"+strconv.Itoa(rank))
}

// jobDir is an ended or live job's directory, for pruning.
type jobDir struct {
	name  string
	size  int64
	mtime time.Time
}

// scanLocked lists the jobs' directories with their size and last write.
func (s *Store) scanLocked() []jobDir {
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return nil
	}
	var dirs []jobDir
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		d := jobDir{name: e.Name()}
		files, _ := os.ReadDir(filepath.Join(s.cfg.Dir, e.Name()))
		for _, f := range files {
			if fi, err := f.Info(); err == nil && fi.Mode().IsRegular() {
				d.size += fi.Size()
				if fi.ModTime().After(d.mtime) {
					d.mtime = fi.ModTime()
				}
			}
		}
		if d.mtime.IsZero() {
			if fi, err := e.Info(); err == nil {
				d.mtime = fi.ModTime()
			}
		}
		dirs = append(dirs, d)
	}
	return dirs
}

// pruneLocked removes ended jobs past MaxAge, then the oldest ended ones
// until room more bytes fit, and recounts the total.
func (s *Store) pruneLocked(room int64) {
	dirs := s.scanLocked()
	slices.SortFunc(dirs, func(a, b jobDir) int { return a.mtime.Compare(b.mtime) })
	var total int64
	for _, d := range dirs {
		total += d.size
	}
	for _, d := range dirs {
		if s.live[d.name] != nil {
			continue
		}
		old := s.now().Sub(d.mtime) > s.cfg.MaxAge
		if !old && total+room <= s.cfg.MaxBytes {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.cfg.Dir, d.name)); err != nil {
			s.log.Warn("cannot remove a job's kept output", zap.String("job", d.name), zap.Error(err))
			continue
		}
		total -= d.size
		s.log.Info("dropped a job's kept output", zap.String("job", d.name), zap.Int64("bytes", d.size), zap.Bool("aged", old))
	}
	s.total = total
}

// Writer appends one rank's records. Its methods may be called from the
// rank's two streams at once.
type Writer struct {
	s    *Store
	job  string
	rank int

	mu      sync.Mutex
	f       *os.File
	seq     [3]uint64 // the last sequence number, by stream
	buf     []byte
	dropped int64 // bytes not kept: the bound was reached, or a write failed
}

// Rank opens job's rank's file for appending; the job counts as live until
// every writer opened for it is closed. A file kept from an earlier round
// is appended to, its sequence numbers going on.
func (s *Store) Rank(job string, rank int) (*Writer, error) {
	if err := validJob(job); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(s.cfg.Dir, job), 0o700); err != nil {
		return nil, fmt.Errorf("rank logs: %w", err)
	}
	path := s.rankPath(job, rank)
	w := &Writer{s: s, job: job, rank: rank}
	if err := w.scanSeqs(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("rank logs: %w", err)
	}
	w.f = f
	lj := s.live[job]
	if lj == nil {
		lj = &liveJob{changed: make(chan struct{})}
		s.live[job] = lj
	}
	lj.writers++
	return w, nil
}

// scanSeqs finds the last sequence numbers of an earlier round's file.
func (w *Writer) scanSeqs(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("rank logs: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	for {
		r, _, err := readRecord(br)
		if err != nil {
			return nil // what follows a damaged record is not read anyway
		}
		w.seq[r.Stream] = r.Seq
	}
}

// Append keeps one piece of the rank's output of stream (Stdout or
// Stderr), read now. Output past the store's bound is dropped and counted.
func (w *Writer) Append(stream int, data []byte, paused bool) {
	if stream != Stdout && stream != Stderr {
		return
	}
	for len(data) > 0 {
		piece := data[:min(len(data), MaxData)]
		data = data[len(piece):]
		w.append(stream, piece, paused && len(data) == 0)
	}
}

func (w *Writer) append(stream int, data []byte, paused bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return
	}
	n := int64(headerBytes + fixedBytes + len(data))
	s := w.s
	s.mu.Lock()
	if s.total+n > s.cfg.MaxBytes && !s.full {
		s.pruneLocked(n)
	}
	fits := s.total+n <= s.cfg.MaxBytes
	s.full = !fits
	if fits {
		s.total += n
	}
	s.mu.Unlock()
	if !fits {
		if w.dropped == 0 {
			s.log.Warn("rank output past the kept output's bound is not kept", zap.String("job", w.job), zap.Int("rank", w.rank),
				zap.Int64("max-bytes", s.cfg.MaxBytes))
			// One line past the bound says where the output stops, so that
			// a reader does not take what is kept for all of it.
			w.writeLocked(Stderr, fmt.Appendf(nil, "muster: the rest of rank %d's output is not kept: its node keeps at most %d bytes of output (agent --rank-logs-max-size)\n",
				w.rank, s.cfg.MaxBytes), false)
		}
		w.dropped += int64(len(data))
		return
	}
	if err := w.writeLocked(stream, data, paused); err != nil {
		if w.dropped == 0 {
			s.log.Warn("cannot keep rank output", zap.String("job", w.job), zap.Int("rank", w.rank), zap.Error(err))
		}
		w.dropped += int64(len(data))
	}
}

// writeLocked writes one record of stream; w.mu is held.
func (w *Writer) writeLocked(stream int, data []byte, paused bool) error {
	w.seq[stream]++
	w.buf = appendRecord(w.buf[:0], Record{Stream: stream, Paused: paused, Seq: w.seq[stream], UnixNano: w.s.now().UnixNano(), Data: data})
	// One write per record: a reader never sees another record's bytes
	// inside it, only, at worst, the end of the file mid-record.
	_, err := w.f.Write(w.buf)
	w.s.changed(w.job)
	return err
}

// Dropped is how many bytes of output were not kept.
func (w *Writer) Dropped() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// Close ends the rank's file; the job ends with its last writer.
func (w *Writer) Close() error {
	w.mu.Lock()
	f := w.f
	w.f = nil
	w.mu.Unlock()
	if f == nil {
		return nil
	}
	err := f.Close()
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if lj := s.live[w.job]; lj != nil {
		if lj.writers--; lj.writers == 0 {
			delete(s.live, w.job)
			close(lj.changed)
			s.pruneLocked(0)
			s.full = false
		}
	}
	return err
}

func (s *Store) changed(job string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lj := s.live[job]; lj != nil {
		close(lj.changed)
		lj.changed = make(chan struct{})
	}
}

// ReadOptions says what Read sends.
type ReadOptions struct {
	// Rank, when not negative, is the one rank wanted.
	Rank int
	// Tail, when not negative, is how many of each rank's last lines.
	Tail int
	// Follow sends new records until the job's last writer here closes.
	Follow bool
}

// Read sends job's kept records, rank by rank in rank order, each rank's in
// the order written, in batches of bounded size. With Follow, it then sends
// new records as they come, until the job ends here or ctx ends. It returns
// ErrNotKept when the node keeps nothing of the job.
func (s *Store) Read(ctx context.Context, job string, opt ReadOptions, send func(rank int, recs []Record) error) error {
	if err := validJob(job); err != nil {
		return err
	}
	dir := filepath.Join(s.cfg.Dir, job)
	offsets := map[int]int64{}
	first := true
	for {
		// Taken before reading: an append after the read closes it.
		s.mu.Lock()
		var changed chan struct{}
		if lj := s.live[job]; lj != nil {
			changed = lj.changed
		}
		s.mu.Unlock()
		ranks, err := listRanks(dir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && first {
				return ErrNotKept
			}
			if !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		for _, rank := range ranks {
			if opt.Rank >= 0 && rank != opt.Rank {
				continue
			}
			tail := -1
			if first {
				tail = opt.Tail
			}
			off, err := readRank(filepath.Join(dir, "rank-"+strconv.Itoa(rank)), offsets[rank], tail,
				func(recs []Record) error { return send(rank, recs) })
			offsets[rank] = off
			if err != nil {
				return err
			}
		}
		first = false
		if !opt.Follow || changed == nil {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// listRanks lists the ranks whose files dir holds, in order.
func listRanks(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ranks []int
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "rank-"); ok {
			if r, err := strconv.Atoi(n); err == nil && r >= 0 {
				ranks = append(ranks, r)
			}
		}
	}
	slices.Sort(ranks)
	return ranks, nil
}

// readRank sends the records of a rank's file from offset on, only its
// last tail lines when tail is not negative, and returns the offset of the
// first record not whole yet (or the end).
func readRank(path string, offset int64, tail int, send func([]Record) error) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return offset, err
	}
	defer f.Close()
	skip := int64(0)
	if tail >= 0 {
		lines, err := countLines(f, offset)
		if err != nil {
			return offset, fmt.Errorf("%s: %w", path, err)
		}
		skip = max(lines-int64(tail), 0)
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset, err
	}
	br := bufio.NewReader(f)
	var batch []Record
	bytesIn := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := send(batch)
		batch, bytesIn = nil, 0
		return err
	}
	for {
		r, size, err := readRecord(br)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return offset, flush()
		}
		if err != nil {
			return offset, fmt.Errorf("%s at byte %d: %w", path, offset, err)
		}
		offset += int64(size)
		for skip > 0 && len(r.Data) > 0 {
			i := bytes.IndexByte(r.Data, '\n')
			if i < 0 {
				i = len(r.Data) - 1 // an unfinished end counts as a line
			}
			r.Data = r.Data[i+1:]
			skip--
		}
		if len(r.Data) == 0 {
			continue
		}
		batch = append(batch, r)
		bytesIn += len(r.Data)
		if len(batch) >= batchRecords || bytesIn >= batchBytes {
			if err := flush(); err != nil {
				return offset, err
			}
		}
	}
}

// countLines counts the lines of the records from offset on: their
// newlines, and each record's unfinished end (a progress bar's state, a
// piece of a long line, a line the other stream cut).
func countLines(f *os.File, offset int64) (int64, error) {
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return 0, err
	}
	br := bufio.NewReader(f)
	var lines int64
	for {
		r, _, err := readRecord(br)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return 0, err
		}
		lines += int64(bytes.Count(r.Data, []byte{'\n'}))
		if len(r.Data) > 0 && r.Data[len(r.Data)-1] != '\n' {
			lines++
		}
	}
	return lines, nil
}

// DefaultDir is where an agent keeps its ranks' output: under systemd's
// StateDirectory when the unit has one, /var/lib/muster/rank-logs as root,
// else this user's state directory ($XDG_STATE_HOME, or ~/.local/state).
func DefaultDir() string { return filepath.Join(paths.OS().StateDir(), "rank-logs") }
