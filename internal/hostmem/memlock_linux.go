package hostmem

import "syscall"

// rlimitMemlock is RLIMIT_MEMLOCK on Linux (resource.h); package syscall does
// not name it on every architecture.
const rlimitMemlock = 8

// rlimInfinity is RLIM_INFINITY as Getrlimit returns it (all bits set).
const rlimInfinity = ^uint64(0)

// lockLimit reads the soft limit on locked memory, the one that applies.
func lockLimit() (cur uint64, err error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(rlimitMemlock, &r); err != nil {
		return 0, err
	}
	return r.Cur, nil
}
