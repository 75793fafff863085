package passes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// This file is the registry of passes by name. `lcc passes`, --print-ir-after,
// the driver's pipelines and the golden tests under testdata look passes up here.
// A pass whose behaviour depends on options registers a Configure function that
// builds it from text options, the form a golden file's `-- pipeline --` section
// uses, one pass per line:
//
//	match-attention require=true
//	dilate-attention segments=4,8 dilations=1,2 offsets=block
//
// Options name the fields of the pass's Go configuration; an option a pass does
// not know is an error.

// Registry lists every pass lcc has, each with its default configuration, in
// registration order.
var Registry []Pass

// configure maps a pass name to the function building it from options.
var configure = map[string]func(*Args) (Pass, error){}

// Register adds a pass to the registry (called from each pass's file).
func Register(p Pass) Pass {
	if _, dup := Lookup(p.Name); dup {
		panic("lcc: BUG: pass " + p.Name + " registered twice")
	}
	Registry = append(Registry, p)
	return p
}

// RegisterConfigurable registers the pass p (its default configuration) and the
// function that builds it from options.
func RegisterConfigurable(p Pass, build func(*Args) (Pass, error)) Pass {
	configure[p.Name] = build
	return Register(p)
}

// Lookup finds a registered pass by name.
func Lookup(name string) (Pass, bool) {
	for _, p := range Registry {
		if p.Name == name {
			return p, true
		}
	}
	return Pass{}, false
}

// Configure returns the registered pass name built with the options args
// ("key=value" words). Without options it is the registered default.
func Configure(name string, args ...string) (Pass, error) {
	p, ok := Lookup(name)
	if !ok {
		return Pass{}, fmt.Errorf("unknown pass %q (lcc passes lists them)", name)
	}
	if len(args) == 0 {
		return p, nil
	}
	build := configure[name]
	if build == nil {
		return Pass{}, fmt.Errorf("pass %s takes no options (got %q)", name, strings.Join(args, " "))
	}
	a := Args{pass: name, kv: map[string]string{}, used: map[string]bool{}}
	for _, w := range args {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return Pass{}, fmt.Errorf("pass %s: option %q: want key=value", name, w)
		}
		if _, dup := a.kv[k]; dup {
			return Pass{}, fmt.Errorf("pass %s: option %s given twice", name, k)
		}
		a.kv[k] = v
	}
	p, err := build(&a)
	if err != nil {
		return Pass{}, err
	}
	if err := a.err; err != nil {
		return Pass{}, err
	}
	var unknown []string
	for k := range a.kv {
		if !a.used[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return Pass{}, fmt.Errorf("pass %s: unknown option(s) %s", name, strings.Join(unknown, ", "))
	}
	return p, nil
}

// ParsePipeline builds the passes of a pipeline written one per line as
// `name key=value ...`; blank lines and lines starting with # are skipped.
func ParsePipeline(text string) ([]Pass, error) {
	var ps []Pass
	for i, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		p, err := Configure(fields[0], fields[1:]...)
		if err != nil {
			return nil, fmt.Errorf("pipeline line %d: %w", i+1, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Args are the options of one pass being configured. Each getter returns the
// default when the option is absent; a malformed value is recorded and reported by
// Configure, so a build function reads its options without checking errors.
type Args struct {
	pass string
	kv   map[string]string
	used map[string]bool
	err  error
}

func (a *Args) get(key string) (string, bool) {
	v, ok := a.kv[key]
	a.used[key] = true
	return v, ok
}

func (a *Args) fail(key, v, want string) {
	if a.err == nil {
		a.err = fmt.Errorf("pass %s: option %s=%q: want %s", a.pass, key, v, want)
	}
}

// String returns option key, or def.
func (a *Args) String(key, def string) string {
	if v, ok := a.get(key); ok {
		return v
	}
	return def
}

// Int returns option key as an integer, or def.
func (a *Args) Int(key string, def int64) int64 {
	v, ok := a.get(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		a.fail(key, v, "an integer")
	}
	return n
}

// Bool returns option key as a boolean, or def.
func (a *Args) Bool(key string, def bool) bool {
	v, ok := a.get(key)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		a.fail(key, v, "true or false")
	}
	return b
}

// Ints returns option key as a comma-separated list of integers, or def.
func (a *Args) Ints(key string, def []int64) []int64 {
	v, ok := a.get(key)
	if !ok {
		return def
	}
	var out []int64
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			a.fail(key, v, "comma-separated integers")
			return nil
		}
		out = append(out, n)
	}
	return out
}
