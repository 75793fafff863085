//go:build !linux

package hostmem

import "errors"

const rlimInfinity = ^uint64(0)

func lockLimit() (uint64, error) { return 0, errors.New("no RLIMIT_MEMLOCK on this system") }
