//go:build unix

package cuda

import (
	"io/fs"
	"os"
	"syscall"
)

// fileOwner returns the owner of fi and the effective uid of this process.
func fileOwner(fi fs.FileInfo) (owner, me int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), os.Geteuid(), true
}
