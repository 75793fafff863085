package passes

import (
	"strings"
	"testing"
)

func TestParsePipeline(t *testing.T) {
	ps, err := ParsePipeline("# comment\nmatch-attention require=true\n\ndilate-attention segments=4,8 dilations=1,2\ndce\n")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "match-attention dilate-attention dce" {
		t.Errorf("passes %q", got)
	}
	for _, c := range []struct{ text, want string }{
		{"fold-everything", `line 1: unknown pass "fold-everything"`},
		{"dce\ncse x=1", "line 2: pass cse takes no options"},
		{"dilate-attention segment=4", "pass dilate-attention: unknown option(s) segment"},
		{"dilate-attention segments=4,x", `option segments="4,x": want comma-separated integers`},
		{"match-attention require=maybe", `option require="maybe": want true or false`},
		{"shard-sequence ranks", `option "ranks": want key=value`},
		{"shard-sequence ranks=2 ranks=4", "option ranks given twice"},
	} {
		if _, err := ParsePipeline(c.text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.text, err, c.want)
		}
	}
}

// Every registered pass has a name and a doc line, and names are unique (Register
// panics on a second registration).
func TestRegistry(t *testing.T) {
	for _, p := range Registry {
		if p.Name == "" || p.Doc == "" || p.Run == nil {
			t.Errorf("pass %+v lacks a name, doc or Run", p)
		}
	}
}
