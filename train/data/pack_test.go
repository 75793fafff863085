package data

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Documents "ab\n", "cdefg\n", "hijklmnopq\n" (longer than T = 8) and "rs" (no final
// separator) pack into windows [ab\n], [cdefg\n], [hijklmno], [pq\n rs].
func TestPackedWindows(t *testing.T) {
	p := filepath.Join(t.TempDir(), "docs.txt")
	if err := os.WriteFile(p, []byte("ab\ncdefg\nhijklmnopq\nrs"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := open(t, "bytes:"+p, Options{SeqLen: 8, Batch: 1, Vocab: 256, PackDocs: true, DocSep: '\n'})
	const I = IgnoreIndex
	for i, want := range []struct {
		ids            string
		labels, starts []int64
	}{
		{"ab\n\n\n\n\n\n", []int64{'b', '\n', I, I, I, I, I, I}, []int64{0, 0, 0, 3, 3, 3, 3, 3}},
		{"cdefg\n\n\n", []int64{'d', 'e', 'f', 'g', '\n', I, I, I}, []int64{0, 0, 0, 0, 0, 0, 6, 6}},
		{"hijklmno", []int64{'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p'}, []int64{0, 0, 0, 0, 0, 0, 0, 0}},
		{"pq\nrs\n\n\n", []int64{'q', '\n', I, 's', I, I, I, I}, []int64{0, 0, 0, 3, 3, 5, 5, 5}},
		{"ab\n\n\n\n\n\n", []int64{'b', '\n', I, I, I, I, I, I}, []int64{0, 0, 0, 3, 3, 3, 3, 3}}, // wraps
	} {
		b := next(t, s)
		var ids strings.Builder
		for _, x := range b.InputIDs.I {
			ids.WriteByte(byte(x))
		}
		if ids.String() != want.ids || !slices.Equal(b.Labels.I, want.labels) ||
			!slices.Equal(b.DocStarts.I, want.starts) {
			t.Errorf("window %d: ids %q labels %v starts %v\nwant %q %v %v", i, ids.String(), b.Labels.I,
				b.DocStarts.I, want.ids, want.labels, want.starts)
		}
	}
}

func TestPackedErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nosep.txt")
	os.WriteFile(p, []byte("abcdefghijklmnop"), 0o644)
	for _, c := range []struct {
		spec string
		sep  int64
		want string
	}{
		{"bytes:" + p, '\n', "separator 10 (--doc-sep) never occurs"},
		{"bytes:" + p, 300, "--doc-sep 300 is outside the model's vocabulary [0, 256)"},
		{"synthetic:copy", 1, "not a synthetic task"},
	} {
		_, err := Open(c.spec, Options{SeqLen: 8, Batch: 1, Vocab: 256, PackDocs: true, DocSep: c.sep})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s sep %d: err %v, want %q", c.spec, c.sep, err, c.want)
		}
	}
}
