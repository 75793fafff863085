package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// AnchorRow is one JSON object an anchor script printed, e.g.
// {"anchor": "sdpa_flash", "T": 32768, "fwd_ms": 3.1, "fwdbwd_ms": 24.3, ...}.
type AnchorRow map[string]any

// Name is the row's "anchor" field ("" if absent).
func (r AnchorRow) Name() string { s, _ := r["anchor"].(string); return s }

// Float returns the numeric field key and whether the row has it.
func (r AnchorRow) Float(key string) (float64, bool) {
	v, ok := r[key].(float64)
	return v, ok
}

// Err is the row's "error" field: the anchor refused the shape ("" if it ran).
func (r AnchorRow) Err() string { s, _ := r["error"].(string); return s }

// Python is the interpreter RunAnchor starts; LCC_PYTHON overrides it.
func Python() string {
	if p := os.Getenv("LCC_PYTHON"); p != "" {
		return p
	}
	return "python3"
}

// RunAnchor runs `python3 DIR/SCRIPT ARGS...` and returns the JSON objects it
// printed, one per stdout line; other lines (warnings) are ignored. Its stderr is
// copied to stderr (nil discards it). A missing script, a failed run or a run
// that printed no JSON is an error naming the command.
func RunAnchor(ctx context.Context, dir, script string, args []string, stderr io.Writer) ([]AnchorRow, error) {
	path := filepath.Join(dir, script)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("perf: anchor %s: %w (--anchors names a copy of the anchors folder)", path, err)
	}
	cmdline := Python() + " " + path + " " + strings.Join(args, " ")
	cmd := exec.CommandContext(ctx, Python(), append([]string{path}, args...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if stderr != nil {
		cmd.Stderr = stderr
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("perf: anchor %q: %w", cmdline, err)
	}
	rows, err := ParseAnchor(&out)
	if err != nil {
		return nil, fmt.Errorf("perf: anchor %q: %w", cmdline, err)
	}
	return rows, nil
}

// ParseAnchor reads anchor output: each line that is a JSON object is a row.
func ParseAnchor(r io.Reader) ([]AnchorRow, error) {
	var rows []AnchorRow
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var row AnchorRow
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("printed no JSON rows")
	}
	return rows, nil
}
