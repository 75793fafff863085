//go:build unix

package userfile

import (
	"os"
	"syscall"
)

// nonblock is the open flag that keeps opening a named pipe from blocking.
const nonblock = syscall.O_NONBLOCK

// errNoReader is the error of opening a named pipe with no reader for
// writing, non-blocking.
var errNoReader error = syscall.ENXIO

// clearNonblock puts f's descriptor back in blocking mode.
func clearNonblock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}
