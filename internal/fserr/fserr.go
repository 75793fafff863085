// Package fserr words file system errors for users. A *fs.PathError prints Go's
// name for the system call that failed ("statat x: no such file or directory"),
// which tells a user nothing; Cause keeps what went wrong, for a message that
// names the file itself.
package fserr

import (
	"errors"
	"io/fs"
)

// Cause is err's cause when err is a *fs.PathError (syscall.ENOENT, whose
// errors.Is(fs.ErrNotExist) still holds), else err.
func Cause(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
