// Package ownfile opens files and makes directories where other local users
// may have planted something first: it follows no link another user owns,
// never waits on a FIFO, and takes only what belongs to the expected user.
// The agent keeps its job directories with it, and the launcher opens
// --events and --log-dir with it: both often run as root.
package ownfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// noWait never follows a link at the last component, never blocks on a
// FIFO (or a device) and never makes a terminal the controlling one.
const noWait = unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY

// OpenAppend opens path for appending, creating it with perm if need be. It
// takes only a regular file of uid with no other name (a hard link could
// make it another user's file).
func OpenAppend(path string, perm os.FileMode, uid int) (*os.File, error) {
	return open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT, perm, uid)
}

// OpenOutput opens path for appending as a shell's >> would, for a user who
// may be root, where others may have planted something first: it follows a
// link only of uid or root (as /dev/stdout is), refuses a FIFO nobody reads
// rather than wait for one, and takes a regular file only of uid (with no
// other name), a FIFO or device only of uid or root.
func OpenOutput(path string, perm os.FileMode, uid int) (*os.File, error) {
	flag := unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if int(st.Uid) != uid && st.Uid != 0 {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("is a symbolic link of uid %d, not uid %d or root", st.Uid, uid)}
		}
		flag &^= unix.O_NOFOLLOW
	} else {
		flag |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(path, flag|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, uint32(perm.Perm()))
	if err != nil && unix.Stat(path, &st) == nil {
		// ENXIO: no reader on a FIFO, or a socket, which open never takes.
		switch typ := st.Mode & unix.S_IFMT; {
		case typ == unix.S_IFIFO && errors.Is(err, unix.ENXIO):
			err = errors.New("is a FIFO nobody reads")
		case typ != unix.S_IFREG && typ != unix.S_IFIFO && typ != unix.S_IFCHR:
			err = fmt.Errorf("is a %s, not a regular file", kind(st.Mode))
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err = unix.Fstat(fd, &st); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			err = checkFile(&st, uid)
		case unix.S_IFIFO, unix.S_IFCHR:
			if int(st.Uid) != uid && st.Uid != 0 {
				err = fmt.Errorf("is a %s of uid %d, not uid %d or root", kind(st.Mode), st.Uid, uid)
			}
		default:
			err = fmt.Errorf("is a %s", kind(st.Mode))
		}
	}
	if err == nil {
		// A FIFO's reader slows the writes, as a terminal does.
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Open opens path to read, as OpenAppend takes it.
func Open(path string, uid int) (*os.File, error) {
	return open(path, unix.O_RDONLY, 0, uid)
}

func open(path string, flag int, perm os.FileMode, uid int) (*os.File, error) {
	fd, err := unix.Open(path, flag|noWait, uint32(perm.Perm()))
	var st unix.Stat_t
	if err != nil {
		// ELOOP, ENXIO (a FIFO nobody reads), EISDIR: say what is there.
		if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			err = fmt.Errorf("is a %s, not a regular file", kind(st.Mode))
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err = unix.Fstat(fd, &st); err == nil {
		err = checkFile(&st, uid)
	}
	if err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	// A regular file never blocks: O_NONBLOCK changes nothing after the open.
	return os.NewFile(uintptr(fd), path), nil
}

func checkFile(st *unix.Stat_t, uid int) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("is a %s, not a regular file", kind(st.Mode))
	case int(st.Uid) != uid:
		return fmt.Errorf("belongs to uid %d, not uid %d", st.Uid, uid)
	case st.Nlink > 1:
		return fmt.Errorf("has %d names (hard links)", st.Nlink)
	}
	return nil
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	}
	return "special file"
}

// CheckDir says why dir is not a directory that uid controls, if it is not:
// it must be a real directory (not a link) of uid or root, with none of the
// write bits in others set, unless sticky allows a sticky one of root's (as
// /tmp is).
func CheckDir(dir string, uid int, others os.FileMode, sticky bool) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case !ok || (int(st.Uid) != uid && st.Uid != 0):
		return fmt.Errorf("%s belongs to uid %d, not uid %d or root", dir, st.Uid, uid)
	case fi.Mode().Perm()&others != 0 && !(sticky && st.Uid == 0 && fi.Mode()&os.ModeSticky != 0):
		return fmt.Errorf("other users may write to %s (mode %o)", dir, fi.Mode().Perm())
	}
	return nil
}

// MkdirAll makes path, with its missing parents, as os.MkdirAll does, for
// uid, and checks it the way sudo and ssh check their files: every link on
// the way is uid's or root's, and every directory it leads through is uid's
// or root's and writable by no one else (a sticky one of root's, as /tmp,
// aside). Group write is left to the group's owner to grant. Nothing is made
// inside a directory that fails the check, so a planted link never leads
// there.
func MkdirAll(path string, perm os.FileMode, uid int) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	p := "/"
	for _, name := range strings.Split(abs, "/") {
		if name == "" {
			continue
		}
		parent := p
		p = filepath.Join(p, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			if err := trusted(parent, uid); err != nil {
				return err
			}
			if err := os.Mkdir(p, perm); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			fi, err = os.Lstat(p)
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if owner := fi.Sys().(*syscall.Stat_t).Uid; int(owner) != uid && owner != 0 {
			return fmt.Errorf("%s is a symbolic link of uid %d, not uid %d or root", p, owner, uid)
		}
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	for d := real; ; d = filepath.Dir(d) {
		if err := CheckDir(d, uid, 0o002, true); err != nil {
			return err
		}
		if d == "/" {
			return nil
		}
	}
}

// trusted checks the directory dir leads to, before anything is made in it.
func trusted(dir string, uid int) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	return CheckDir(real, uid, 0o002, true)
}
