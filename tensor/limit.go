package tensor

// This file holds the one check every allocation whose size a file decides goes
// through (Alloc, HostBytes), and the one way messages print values that a file
// decides (Brief), so that neither a shape nor an attribute list can make lcc
// allocate terabytes or print megabytes.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrTooLarge is wrapped by the errors of Alloc and HostBytes.
var ErrTooLarge = errors.New("too large for host memory")

// HostElemBytes is the bytes one element takes in a host Tensor: 8, whatever the
// dtype, since floats are held as float64 and integers as int64 (see the package
// invariants). Host memory estimates count with it, not with DType.Size.
const HostElemBytes = 8

// HostBytes is the host memory a Tensor of dt and shape holds, or an error wrapping
// ErrTooLarge when shape has a negative dim or more than MaxElements elements.
func HostBytes(dt DType, shape []int64) (int64, error) {
	n, err := Numel(shape)
	if err != nil {
		return 0, fmt.Errorf("%v%s: %w: %w", dt, Brief(shape), ErrTooLarge, err)
	}
	return n * HostElemBytes, nil
}

// Alloc is New for a size that a file or an attribute decides: a shape past
// MaxElements is an error naming the shape and its bytes, not a panic.
func Alloc(dt DType, shape ...int64) (*Tensor, error) {
	if _, err := HostBytes(dt, shape); err != nil {
		return nil, err
	}
	return New(dt, shape...), nil
}

// MaxBrief is about the longest text Brief returns, in bytes.
const MaxBrief = 1024

// Brief formats v as fmt's %v does, cut to about MaxBrief bytes with a count of
// what was left out. Messages print attribute values, shapes and other lists that
// a file decides through it: a perm of five million entries reads as its first
// hundred-odd entries.
func Brief(v any) string {
	if list, ok := v.([]int64); ok {
		// Lists are cut at an element, and say how long they are.
		var sb strings.Builder
		sb.WriteByte('[')
		for i, d := range list {
			if sb.Len() > MaxBrief {
				fmt.Fprintf(&sb, " ... (%d entries)]", len(list))
				return sb.String()
			}
			if i > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(strconv.FormatInt(d, 10))
		}
		return sb.String() + "]"
	}
	s := fmt.Sprint(v)
	if len(s) <= MaxBrief {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:MaxBrief], len(s))
}
