package passes

import (
	"fmt"
	"sort"
	"strings"

	"github.com/lcc-dev/lcc/ir"
)

// Pattern is one local rewrite rule, in the style of tinygrad's PatternMatcher:
// a root op plus a function that either declines (returns false, leaving f
// untouched) or rewrites. Write a one-line rule comment above each pattern:
//
//	// x*1 -> x
//	{Name: "mul-one", Root: ir.OpMul, Rewrite: foldMulOne},
type Pattern struct {
	// Name identifies the rule in RewriteStats and errors.
	Name string
	// Root is the op of the nodes the rule is tried on.
	Root ir.Op
	// Rewrite is called with a live node n whose op is Root and a builder b
	// positioned just before n, with n's name set for the nodes it builds. On a
	// match it builds the replacement with b, redirects n's results with
	// e.Replace and returns true; the driver removes what became dead. When it
	// does not match it must return false without changing the function. It reads
	// readers and outputs through e, whose queries cost what they return, not the
	// size of the function.
	Rewrite func(e *Editor, n *ir.Node, b *ir.Builder) bool
}

// RewriteStats says what one run of a rewrite pass did.
type RewriteStats struct {
	// Hits counts successful rewrites per pattern name.
	Hits map[string]int
	// Sweeps is the number of passes over the body, the last of which found
	// nothing to rewrite when the run reached a fixed point.
	Sweeps int
}

// Total is the number of rewrites of every pattern together.
func (s RewriteStats) Total() int {
	n := 0
	for _, h := range s.Hits {
		n += h
	}
	return n
}

// String lists the hits per pattern in name order: "mul-one=2 add-zero=1".
func (s RewriteStats) String() string {
	names := make([]string, 0, len(s.Hits))
	for name := range s.Hits {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", name, s.Hits[name]))
	}
	return strings.Join(parts, " ")
}

// DefaultMaxSweeps caps the sweeps of a rewrite pass when maxIter is not positive.
const DefaultMaxSweeps = 32

// Rewrite returns a pass named name that applies patterns to a fixed point (see
// ApplyPatterns) and then removes dead code. It does not register the pass.
func Rewrite(name string, patterns []Pattern, maxIter int) Pass {
	p, _ := RewriteWithStats(name, patterns, maxIter)
	return p
}

// RewriteWithStats is Rewrite that also returns the statistics of the pass's
// latest run; they are overwritten by each run.
func RewriteWithStats(name string, patterns []Pattern, maxIter int) (Pass, *RewriteStats) {
	stats := &RewriteStats{Hits: map[string]int{}}
	var names []string
	for _, p := range patterns {
		names = append(names, p.Name)
	}
	return Pass{Name: name, Doc: "rewrite " + strings.Join(names, ", "),
		Run: func(f *ir.Func) error {
			s, err := ApplyPatterns(f, patterns, maxIter)
			*stats = s
			return err
		}}, stats
}

// ApplyPatterns rewrites f with patterns until a sweep over the body changes
// nothing, or fails after maxIter sweeps (DefaultMaxSweeps when maxIter ≤ 0): a
// rule set that never settles is a bug in the rules, and silently stopping would
// hide it. Within a sweep nodes are visited in body order and, for each node, the
// patterns with its op in the order given; after a hit the node is not offered to
// later patterns in that sweep; nodes built in a sweep are first visited in the
// next. Dead code is removed before each sweep, and what a hit leaves unread is
// dead at once (see Editor), so a pattern only ever sees live nodes. A sweep
// costs time linear in the body plus what its patterns touch. An error recorded
// by the builder during a rewrite is returned, naming the pattern and the node.
func ApplyPatterns(f *ir.Func, patterns []Pattern, maxIter int) (RewriteStats, error) {
	if maxIter <= 0 {
		maxIter = DefaultMaxSweeps
	}
	stats := RewriteStats{Hits: map[string]int{}}
	byRoot := make(map[ir.Op][]*Pattern)
	for i := range patterns {
		p := &patterns[i]
		if p.Rewrite == nil {
			return stats, fmt.Errorf("pattern %q has no Rewrite function", p.Name)
		}
		byRoot[p.Root] = append(byRoot[p.Root], p)
	}
	for stats.Sweeps < maxIter {
		stats.Sweeps++
		DeadCode(f)
		e := newEditor(f)
		changed := false
		for i, n := range e.body {
			for _, p := range byRoot[n.Op] {
				if e.dead[n] {
					break // left unread by an earlier hit of this sweep
				}
				before := e.added
				b := e.builder(i)
				b.SetName(n.Name)
				ok := p.Rewrite(e, n, b)
				if err := b.Err(); err != nil {
					return stats, fmt.Errorf("pattern %s at %s: %w", p.Name, n.Where(), err)
				}
				if !ok {
					if e.added != before {
						panic(fmt.Sprintf("lcc: BUG: pattern %s declined %s after adding nodes",
							p.Name, n.Where()))
					}
					continue
				}
				stats.Hits[p.Name]++
				changed = true
				e.removeDead()
				break
			}
		}
		e.splice()
		if !changed {
			return stats, nil
		}
	}
	return stats, fmt.Errorf("rewrites did not reach a fixed point after %d sweeps (hits: %v)",
		maxIter, stats)
}
