package ir

import (
	"os"
	"testing"
)

// TestDigestFollowsPrint: two functions have one digest exactly when they print
// the same, so the pass manager's "changed" is what the text form would say.
func TestDigestFollowsPrint(t *testing.T) {
	src, err := os.ReadFile("testdata/block.lcc")
	if err != nil {
		t.Fatal(err)
	}
	parse := func() *Func {
		f, err := Parse(string(src))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := Digest(parse())
	if Digest(parse()) != base || Digest(parse().Clone()) != base {
		t.Fatal("the same function, parsed twice or cloned, has two digests")
	}
	for _, tc := range []struct {
		name string
		edit func(f *Func)
	}{
		{"node renamed", func(f *Func) { f.Body[0].Name += "x" }},
		{"arg swapped", func(f *Func) {
			for _, n := range f.Body {
				if len(n.Args) == 2 && n.Args[0] != n.Args[1] {
					n.Args[0], n.Args[1] = n.Args[1], n.Args[0]
					return
				}
			}
			t.Fatal("no binary node")
		}},
		{"attribute changed", func(f *Func) {
			for _, n := range f.Body {
				if len(n.Attrs) > 0 {
					n.Attrs[0].Value = "changed"
					return
				}
			}
			t.Fatal("no node with attributes")
		}},
		{"shape changed", func(f *Func) { f.Params[0].Value.Type.Shape[0]++ }},
		{"output renamed", func(f *Func) { f.Outputs[0].Name += "x" }},
		{"node dropped", func(f *Func) { f.Body = f.Body[:len(f.Body)-1] }},
	} {
		f := parse()
		tc.edit(f)
		if Digest(f) == base {
			t.Errorf("%s: the digest did not change (the print did)", tc.name)
		}
	}
}
