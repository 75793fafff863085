//go:build !unix

package userfile

import "os"

// nonblock is 0 where opening a file cannot block on a missing writer.
const nonblock = 0

func clearNonblock(*os.File) error { return nil }
