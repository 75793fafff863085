//go:build !unix

package userfile

import (
	"errors"
	"os"
)

// nonblock is 0 where opening a file cannot block on a missing writer.
const nonblock = 0

// errNoReader never happens where opening does not block.
var errNoReader = errors.New("no reader")

func clearNonblock(*os.File) error { return nil }
