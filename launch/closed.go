package launch

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// closedNotify returns a channel closed when w, a pipe or socket, loses its
// reader (`| head -1` exited), or nil for anything else. The launcher then
// stops the job at once, not at its next write, which a quiet job may not
// make for a long time.
func closedNotify(w io.Writer) <-chan struct{} {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return nil
	}
	fd := int(f.Fd())
	ch := make(chan struct{})
	go func() {
		fds := []unix.PollFd{{Fd: int32(fd)}}
		for {
			if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
				return
			}
			if fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				close(ch)
				return
			}
		}
	}()
	return ch
}
