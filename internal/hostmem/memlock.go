package hostmem

import (
	"fmt"
	"math"
)

// Unlimited is MemLock's figure where no limit applies.
const Unlimited = math.MaxInt64

// MemLock returns the soft RLIMIT_MEMLOCK of this process: how many bytes it may
// lock in memory, the bound the brief of issue #26 puts on pinned host buffers
// (cuMemHostAlloc) beside what the host has available. Unlimited (RLIM_INFINITY,
// or a figure past int64) is returned as Unlimited. It is an error where the
// limit cannot be read (not Linux).
func MemLock() (int64, error) {
	cur, err := lockLimit()
	if err != nil {
		return 0, fmt.Errorf("hostmem: RLIMIT_MEMLOCK: %w", err)
	}
	return memLockBytes(cur), nil
}

// memLockBytes maps a raw rlimit to bytes, RLIM_INFINITY to Unlimited.
func memLockBytes(cur uint64) int64 {
	if cur == rlimInfinity || cur > math.MaxInt64 {
		return Unlimited
	}
	return int64(cur)
}

// Limits is what bounds this process's host memory, each figure with where it
// comes from, for a planner that compares a plan's host peak and pinned bytes
// with them.
type Limits struct {
	// Available is Available's figure and Source its source.
	Available int64
	Source    string
	// MemLock is MemLock's figure (Unlimited: none).
	MemLock int64
}

// Read returns the host's limits; ok is false where Available cannot be read.
// A memlock limit that cannot be read counts as Unlimited.
func Read() (Limits, bool) {
	b, src, err := Available()
	if err != nil {
		return Limits{}, false
	}
	lock, err := MemLock()
	if err != nil {
		lock = Unlimited
	}
	return Limits{Available: b, Source: src, MemLock: lock}, true
}
