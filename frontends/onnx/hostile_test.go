package onnx

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/hostile"
	"github.com/lcc-dev/lcc/ir"
)

// TestHostileModels imports every model of package hostile. One whose contents
// lcc refuses fails with an error naming the node, under 4 KB, and no panic
// or "BUG"; one only a host run refuses (Run) imports without allocating what
// its sizes say (folding and the lowerings make full nodes, not constants), and a
// valid one (OK) imports.
func TestHostileModels(t *testing.T) {
	for _, c := range hostile.Cases() {
		start := time.Now()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f, err := importHostile(c)
		runtime.ReadMemStats(&after)
		if d := time.Since(start); d > time.Second {
			t.Logf("%s: %v", c.Name, d)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<30 {
			t.Errorf("%s: importing allocated %d bytes", c.Name, alloc)
		}
		if c.Run || c.OK {
			if err != nil {
				t.Errorf("%s: %v", c.Name, err)
			} else if len(f.Body) == 0 {
				t.Errorf("%s: an empty function", c.Name)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: imported", c.Name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `"`+c.Node) || !strings.Contains(msg, c.Want) {
			t.Errorf("%s: the error does not name node %q and hold %q: %.300s", c.Name, c.Node, c.Want, msg)
		}
		if strings.Contains(msg, "BUG") || strings.Contains(msg, "panic") || len(msg) > 4096 {
			t.Errorf("%s: a %d-byte error reading as a crash: %.300s", c.Name, len(msg), msg)
		}
	}
}

// importHostile decodes and imports case c.
func importHostile(c hostile.Case) (*ir.Func, error) {
	m, err := Decode(c.Spec.Bytes(), "", LoadOptions{Source: c.Name + ".onnx"})
	if err != nil {
		return nil, err
	}
	return Import(m, ImportOptions{})
}
