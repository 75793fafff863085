package plot

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestHeatmap draws a pass-key table: the PNG decodes, and bad tables and
// formats are refused naming the file.
func TestHeatmap(t *testing.T) {
	g := Grid{Cols: []string{"1K", "4K", "16K"}, Rows: []string{"0%", "50%", "100%"},
		Scores: [][]float64{{1, 0.8, 0.2}, {1, 0.6, 0}, {0.9, math.NaN(), 0.1}},
		XLabel: "context length (tokens)", YLabel: "needle depth"}
	path := filepath.Join(t.TempDir(), "passkey.png")
	if err := Heatmap(path, "pass-key retrieval", g); err != nil {
		t.Fatal(err)
	}
	readablePNG(t, path)
	bad := g
	bad.Scores = bad.Scores[:2]
	if err := Heatmap(path, "x", bad); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("2 rows of scores for 3 labels: %v", err)
	}
	if err := Heatmap(filepath.Join(t.TempDir(), "a.txt"), "x", g); err == nil {
		t.Error("a .txt heat map was not refused")
	}
}
