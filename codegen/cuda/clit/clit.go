// Package clit renders Go values as CUDA C literals. It is shared by the
// generated kernels of codegen/cuda and the flash-attention templates of
// codegen/cuda/flash, so a constant reads back bit for bit in every kernel.
package clit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Float renders v as a C float literal that reads back as float32(v) exactly;
// NaN and ±Inf, which have no literal, become __int_as_float of their bits.
func Float(v float64) string {
	f := float32(v)
	if math.IsInf(float64(f), 0) || f != f {
		return fmt.Sprintf("__int_as_float(0x%08x)", math.Float32bits(f))
	}
	s := strconv.FormatFloat(float64(f), 'g', -1, 32)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s + "f"
}
