package launch

import (
	"context"
	"errors"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// stdinChunkBytes is how much of the launcher's stdin one message carries.
const stdinChunkBytes = 32 << 10

// stdinSent is what forwarding the launcher's stdin to a job did: whether
// it read any of it, and whether it is over. A job the store lost can be
// submitted again with the same stdin only if nothing of it was read.
type stdinSent struct {
	read atomic.Bool   // a byte was read: it went with the job
	end  atomic.Bool   // the reading is over (r's end, or an error)
	done chan struct{} // closed when the forwarding returned
}

// sendStdin copies r to the job's stdin ranks through the store, a chunk at
// a time: the store holds a few chunks and gRPC's flow control makes Send
// wait when the ranks read slower than r delivers, so a huge stdin is never
// held in memory. It returns at r's end (the ranks then read EOF), when the
// job no longer reads, or when ctx ends. It marks sent read once r gives
// a byte.
func sendStdin(ctx context.Context, c *storeclient.Client, job string, r io.Reader, sent *stdinSent) error {
	stream, err := c.WriteStdin(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&musterv1.StdinChunk{JobId: job}); err != nil {
		return finishStdin(stream)
	}
	buf := make([]byte, stdinChunkBytes)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			sent.read.Store(true)
			// Send encodes the message before it returns: buf may be reused.
			if err := stream.Send(&musterv1.StdinChunk{Data: buf[:n]}); err != nil {
				// The store ended the stream: the job ended or reads no more.
				return finishStdin(stream)
			}
		}
		if rerr != nil {
			sent.end.Store(true)
			// EOF, or a read error (EIO on a terminal that went away): either
			// way the job's stdin ends here.
			err := finishStdin(stream)
			if errors.Is(rerr, io.EOF) {
				return err
			}
			return rerr
		}
	}
}

func finishStdin(stream musterv1.Jobs_WriteStdinClient) error {
	_, err := stream.CloseAndRecv()
	return err
}

// StdinReader is what the launcher forwards of f, its stdin: f itself, or
// nothing (EOF at once) when f is the terminal of a launcher running in the
// background, which the kernel would stop (SIGTTIN) for reading it.
func StdinReader(f *os.File) io.Reader {
	rc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	background := false
	rc.Control(func(fd uintptr) {
		fg, err := unix.IoctlGetInt(int(fd), unix.TIOCGPGRP)
		background = err == nil && fg != unix.Getpgrp()
	})
	if background {
		return eofReader{}
	}
	return f
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
