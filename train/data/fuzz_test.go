package data

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpenTokens opens a hostile token file (tokens: of either width, or
// bytes:) and draws batches from it: Open must return a stream or an error,
// never panic, and every id a stream gives must be in the vocabulary.
func FuzzOpenTokens(f *testing.F) {
	f.Add([]byte{1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0}, uint8(2), uint8(3), uint16(512))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}, uint8(4), uint8(2),
		uint16(300))
	f.Add([]byte("the quick brown fox"), uint8(1), uint8(4), uint16(256))
	f.Add([]byte{1, 2, 3}, uint8(2), uint8(2), uint16(2))
	f.Fuzz(func(t *testing.T, raw []byte, width, seqLen uint8, vocab uint16) {
		p := filepath.Join(t.TempDir(), "toks.bin")
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		spec, o := "tokens:"+p, Options{SeqLen: int(seqLen%16) + 2, Batch: 2, Vocab: int64(vocab),
			TokenBytes: int(width % 5)}
		if width%5 == 1 {
			spec = "bytes:" + p
		}
		s, err := Open(spec, o)
		if err != nil {
			return
		}
		defer s.Close()
		for range 3 {
			b, err := s.Next()
			if err != nil {
				t.Fatalf("a file Open accepted fails a batch: %v", err)
			}
			for i, id := range b.InputIDs.I {
				if id < 0 || id >= o.Vocab || b.Labels.I[i] < 0 || b.Labels.I[i] >= o.Vocab {
					t.Fatalf("id %d or label %d outside [0, %d)", id, b.Labels.I[i], o.Vocab)
				}
			}
		}
	})
}
