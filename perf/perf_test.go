package perf

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAnchor(t *testing.T) {
	out := "warning: something\n" +
		`{"anchor": "sdpa_flash", "T": 32768, "fwd_ms": 6.0, "fwd_tflops": 90.0, "fwdbwd_ms": 24.3, "fwdbwd_tflops": 316.0}` + "\n" +
		`{"anchor": "sdpa_efficient", "error": "No available kernel"}` + "\n"
	rows, err := ParseAnchor(strings.NewReader(out))
	if err != nil || len(rows) != 2 {
		t.Fatalf("ParseAnchor: %v, %d rows", err, len(rows))
	}
	r := AnchorResult(rows[0], "fwd", "fwdbwd")
	if f, ok := r.Figure("fwdbwd"); r.Who != "sdpa_flash" || !ok || f.Ms != 24.3 || f.TFLOPs != 316 {
		t.Fatalf("AnchorResult: %+v", r)
	}
	if e := AnchorResult(rows[1], "fwd"); e.Note == "" || len(e.Figures) != 0 {
		t.Fatalf("an anchor's error: %+v", e)
	}
	if _, err := ParseAnchor(strings.NewReader("no json\n")); err == nil {
		t.Fatal("output without JSON rows is not an error")
	}
	if _, err := ParseAnchor(strings.NewReader("{broken\n")); err == nil {
		t.Fatal("a malformed JSON line is not an error")
	}
}

func TestCompare(t *testing.T) {
	lcc := Result{Who: "lcc", Figures: []Figure{{Phase: "fwdbwd", Ms: 12, TFLOPs: 600}}}
	a := Result{Who: "sdpa_flash", Figures: []Figure{{Phase: "fwdbwd", Ms: 24, TFLOPs: 300}}}
	var buf bytes.Buffer
	if err := Compare(&buf, "t", lcc, []Result{a}, "fwd", "fwdbwd"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "2.000") {
		t.Fatalf("the ratio anchor/lcc = 2 is missing:\n%s", buf.String())
	}
}

func TestRunAnchor(t *testing.T) {
	if _, err := RunAnchor(context.Background(), t.TempDir(), "attention.py", nil, nil); err == nil ||
		!strings.Contains(err.Error(), "attention.py") {
		t.Fatalf("a missing script: %v", err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "a.py")
	if err := os.WriteFile(script, []byte("echo 'log line'; echo '{\"anchor\": \"x\", \"fwd_ms\": 1.5}'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LCC_PYTHON", "sh")
	rows, err := RunAnchor(context.Background(), dir, "a.py", nil, nil)
	if err != nil || len(rows) != 1 || rows[0].Name() != "x" {
		t.Fatalf("RunAnchor: %v %v", err, rows)
	}
	if f, _ := rows[0].Float("fwd_ms"); f != 1.5 {
		t.Fatalf("fwd_ms = %v", f)
	}
}

func TestParseTiles(t *testing.T) {
	ts, err := ParseTiles("128,64,64,128,128,64,2; 64,64,32,128,64,64,3")
	if err != nil || len(ts) != 2 || ts[1].BwdBr != 32 || ts[1].Stages != 3 {
		t.Fatalf("ParseTiles: %v %+v", err, ts)
	}
	if _, err := ParseTiles("1,2"); err == nil {
		t.Fatal("a short list is not an error")
	}
}
