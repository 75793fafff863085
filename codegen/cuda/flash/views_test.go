package flash

import (
	"strings"
	"testing"
)

// TestViewsCheck: views pass Check for dense attention with the fused backward
// and are refused, naming what is wrong, for a dilated branch, a ring block,
// the split dQ and rows that do not start on 16 bytes.
func TestViewsCheck(t *testing.T) {
	base := Desc{B: 2, T: 256, S: 256, Hq: 4, Hkv: 2, D: 64, Causal: true, Tier: 2}
	qkv := func(off int64) Layout { return Layout{Off: off, Row: 512, Batch: 256 * 512} }
	ok := base
	ok.Views = Views{Q: qkv(0), K: qkv(256), V: qkv(384), DV: qkv(384)}
	if err := ok.Defaults().Check(); err != nil {
		t.Fatalf("dense views: %v", err)
	}
	bad := map[string]func(d *Desc){
		"dense attention":   func(d *Desc) { d.W, d.R = 128, 2 },
		"dense attention ":  func(d *Desc) { d.QPos = 64 },
		"dense attention  ": func(d *Desc) { d.DQ = DQSplit },
		"view of k":         func(d *Desc) { d.Views.K.Off = 260 },
		"view of dv":        func(d *Desc) { d.Views.DV.Row = 100 },
		"view of v":         func(d *Desc) { d.Views.V.Batch = 512 },
	}
	for want, edit := range bad {
		d := ok
		edit(&d)
		err := d.Defaults().Check()
		if err == nil || !strings.Contains(err.Error(), strings.TrimSpace(want)) {
			t.Errorf("%q: Check gave %v", want, err)
		}
	}
	// The zero Views render the same bytes as before views existed: the
	// header's strides are the row-major ones.
	k1, err := Forward(base.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(k1.Body, "#define FA_VRS 128LL") || !strings.Contains(k1.Body, "#define FA_KVVIEW 0") {
		t.Errorf("own buffers: the header's v row stride or FA_KVVIEW is not the row-major one")
	}
}
