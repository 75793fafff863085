//go:build unix

package userfile

import (
	"os"
	"syscall"
)

// isBlocking says whether f's descriptor lacks O_NONBLOCK.
func isBlocking(f *os.File) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var flags uintptr
	var errno syscall.Errno
	rc.Control(func(fd uintptr) {
		flags, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	})
	if errno != 0 {
		return false, errno
	}
	return flags&syscall.O_NONBLOCK == 0, nil
}
