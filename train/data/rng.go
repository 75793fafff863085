package data

import (
	"fmt"
	"math/bits"
	"strconv"
)

// RNG is SplitMix64 (Steele, Lea and Flood, "Fast Splittable Pseudorandom Number
// Generators", OOPSLA 2014). Its whole state is one uint64, so a checkpoint saves
// it exactly and a resumed run draws the same numbers; its output depends on no Go
// library version, unlike math/rand's helpers.
type RNG struct{ state uint64 }

// NewRNG returns a generator seeded with seed.
func NewRNG(seed uint64) *RNG { return &RNG{state: seed} }

// Uint64 returns the next 64 random bits.
func (r *RNG) Uint64() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// IntN returns a uniform integer in [0, n) by Lemire's multiply-and-reject
// ("Fast Random Integer Generation in an Interval", TOMS 2019). n must be > 0.
func (r *RNG) IntN(n int64) int64 {
	if n <= 0 {
		panic(fmt.Sprintf("lcc: BUG: RNG.IntN(%d)", n))
	}
	un := uint64(n)
	hi, lo := bits.Mul64(r.Uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), un)
		}
	}
	return int64(hi)
}

// State returns the generator's state as 16 hex digits (a JSON-safe form: JSON
// numbers lose uint64 precision in many readers).
func (r *RNG) State() string { return fmt.Sprintf("%016x", r.state) }

// SetState restores a state returned by State.
func (r *RNG) SetState(s string) error {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || len(s) != 16 {
		return fmt.Errorf("rng state %q: want 16 hex digits", s)
	}
	r.state = v
	return nil
}
