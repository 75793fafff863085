package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// byteSize is a flag holding a number of bytes, written with a unit: B, decimal
// kB, MB, GB, TB (powers of 1000) or binary KiB, MiB, GiB, TiB (powers of 1024),
// case-insensitive, with an optional fraction (1.5GiB). A number without a unit
// other than 0 is refused: --memory-budget=80 meant 80 GiB, not 80 bytes.
type byteSize int64

var byteUnits = []struct {
	suffix string
	scale  float64
}{
	// Longest suffixes first, so "GiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	// Ki, Mi, ...: Kubernetes' spelling of the binary units, as cluster limits are written.
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	// A bare k, m, g or t is decimal, as kB is; "b" alone last, after every unit ending in b.
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12}, {"b", 1},
}

// parseBytes reads a byte size (see byteSize). Its errors do not repeat s: the
// flag's error names it.
func parseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	scale := 0.0 // no unit yet
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, scale = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.scale
			break
		}
	}
	x, err := strconv.ParseFloat(t, 64)
	// Well below MaxInt64: a float64 near 2^63 may round up past it, and the int64
	// conversion below would overflow.
	if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) || x*scale > math.MaxInt64/2 {
		return 0, fmt.Errorf("not a size: want a number with a unit (80GB, 70GiB, 512MiB, 85899345920B)")
	}
	// 0 needs no unit (it means "not given"); any other bare number is ambiguous.
	if scale == 0 && x != 0 {
		return 0, fmt.Errorf("no unit: %sGiB? (or %sGB; %sB for bytes)", t, t, t)
	}
	// Rounded, not truncated: 4.1GB is 4.1e9 bytes, where float64 holds 4099999999.9999995.
	return int64(math.Round(x * max(scale, 1))), nil
}

// Set parses a size with its unit (80GiB, 70GB, 512MiB, 80B); a bare number is
// refused with a suggestion, since --memory-budget=80 meaning 80 bytes is never
// what was meant.
func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// String is the size in bytes, with its unit so that it parses again.
func (b *byteSize) String() string {
	// "0", not "0B": pflag shows no default in --help when the value reads as zero.
	if *b == 0 {
		return "0"
	}
	return strconv.FormatInt(int64(*b), 10) + "B"
}

// Type names the flag's value in usage lines.
func (b *byteSize) Type() string { return "bytes" }

// positiveFlags are the flags that, when given, must be positive: a zero would
// read as "not given" further down and silently pick a default.
var positiveFlags = []string{"seq-len", "batch", "ranks"}

// checkPositiveFlags refuses --seq-len=0 and the like. It is the root command's
// PersistentPreRunE, so every command checks them before its RunE.
func checkPositiveFlags(cmd *cobra.Command) error {
	for _, name := range positiveFlags {
		f := cmd.Flags().Lookup(name)
		// Commands without the flag, and flags left at their default, pass.
		if f == nil || !f.Changed {
			continue
		}
		if n, err := strconv.ParseInt(f.Value.String(), 10, 64); err == nil && n <= 0 {
			return fmt.Errorf("--%s %d: want a positive integer", name, n)
		}
	}
	return nil
}

// suggestFlag is the commands' flag error handler: for an unknown flag it adds
// the closest flags the command has, as cobra does for unknown commands.
func suggestFlag(cmd *cobra.Command, err error) error {
	msg := err.Error()
	var name string
	switch {
	case strings.HasPrefix(msg, "unknown flag: --"):
		name = strings.TrimPrefix(msg, "unknown flag: --")
	case strings.HasPrefix(msg, "unknown shorthand flag: "):
		// "unknown shorthand flag: 'x' in -xyz"
		if i := strings.Index(msg, " in -"); i >= 0 {
			name = msg[i+len(" in -"):]
		}
	default:
		return plainFlagError(err)
	}
	// Every flag at the smallest distance is offered: the user picks, lcc does not.
	var best []string
	bestD := 1 << 30
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(name, f.Name)
		// A prefix either way (--seq for --seq-len, --seq-lens) counts as one typo.
		if strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) {
			d = min(d, 1)
		}
		switch {
		case d < bestD:
			best, bestD = []string{f.Name}, d
		case d == bestD:
			best = append(best, f.Name)
		}
	})
	// More edits than a third of the name (two always allowed) is a guess, not a
	// suggestion: point at --help instead.
	if len(best) == 0 || bestD > max(2, len(name)/3) {
		return fmt.Errorf("%s (see lcc %s --help)", msg, cmd.Name())
	}
	for i := range best {
		best[i] = "--" + best[i]
	}
	return fmt.Errorf("%s; did you mean %s?", msg, strings.Join(best, " or "))
}

// badValue matches pflag's message for a value that does not parse, which ends
// in Go's: `invalid argument "abc" for "--lr" flag: strconv.ParseFloat: parsing
// "abc": invalid syntax`.
var badValue = regexp.MustCompile(`^invalid argument (".*") for "(?:-\w, )?(--[\w-]+)" flag: (.*)$`)

// wantOfParse names, for Go's parse functions, what a flag's value must be.
var wantOfParse = []struct{ prefix, want string }{
	{"strconv.ParseFloat", "a number"},
	{"strconv.ParseInt", "an integer"},
	{"strconv.ParseUint", "a non-negative integer"},
	{"strconv.ParseBool", "true or false"},
	{"time: ", "a duration such as 90s or 5m"},
}

// plainFlagError words a value that does not parse as the flag and what it
// wants (`--lr "abc": want a number`), without Go's function names.
func plainFlagError(err error) error {
	m := badValue.FindStringSubmatch(err.Error())
	// Other messages (a flag given without its value) already read well.
	if m == nil {
		return err
	}
	for _, w := range wantOfParse {
		if strings.HasPrefix(m[3], w.prefix) {
			// strconv's range error: the value is well formed, so "want a number" would mislead.
			if strings.HasSuffix(m[3], "value out of range") {
				return fmt.Errorf("%s %s: out of range", m[2], m[1])
			}
			return fmt.Errorf("%s %s: want %s", m[2], m[1], w.want)
		}
	}
	return fmt.Errorf("%s %s: %s", m[2], m[1], m[3])
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	// Two rows of the dynamic-programming table: flag names are short, but there is
	// no need for the whole matrix.
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
