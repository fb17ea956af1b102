package supervise

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// OpenTerminal opens a pseudo-terminal for one of a worker's output streams:
// master, which NewTerminalReader reads as NewReader reads a pipe, and
// slave, the worker's stdout or stderr (Worker.Stdout, Worker.Stderr). The
// terminal is raw, so that the bytes the worker writes are the bytes read
// (no \n made \r\n), and is rows by cols (0 for unknown). It is nobody's
// controlling terminal. uid, when not -1, is made the slave's owner, the
// worker's user, as a login's terminal is its user's.
//
// The master is opened as os.OpenFile opens any device, registered with the
// runtime's poller, and its ioctls go through SyscallConn: calling its Fd
// would make it blocking, and a blocking file has no read deadlines, which
// the Reader needs to show an unfinished line (a progress bar) and to cut.
func OpenTerminal(rows, cols uint16, uid int) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
	}
	defer func() {
		if err != nil {
			master.Close()
			if slave != nil {
				slave.Close()
			}
		}
	}()
	rc, err := master.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
		}
	}); err != nil {
		return nil, nil, err
	}
	if ierr != nil {
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", ierr)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
	}
	// The slave is the worker's: Fd's blocking mode is what it gets anyway.
	sfd := int(slave.Fd())
	t, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
	if err != nil {
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
	}
	makeRaw(t)
	if err := unix.IoctlSetTermios(sfd, unix.TCSETS, t); err != nil {
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
	}
	if err := unix.IoctlSetWinsize(sfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
	}
	if uid != -1 {
		if err := unix.Fchown(sfd, uid, -1); err != nil {
			return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
		}
	}
	return master, slave, nil
}

// makeRaw sets t as cfmakeraw(3) does: no output processing (OPOST off, so
// no \r before \n), no echo, no line editing, no signals from input.
func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
}

// NewTerminalReader reads a pseudo-terminal's master from OpenTerminal. Once
// every holder of the slave has closed it, the master's read fails with EIO
// after the last byte: that is its end, as EOF is a pipe's.
func NewTerminalReader(master *os.File) *Reader { return &Reader{f: master, terminal: true} }
