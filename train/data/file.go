package data

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/internal/userfile"
)

// fileSource reads windows of a token file in order. A window at token p covers
// tokens [p, p + T] (T+1 tokens: T inputs and the target after the last one),
// and the next starts at p + T, so consecutive windows share one token and every
// token but the first is a target exactly once per epoch. A window that would
// run past the end starts again at token 0. With one T throughout, sequence k
// is window k mod W at token (k mod W)·T (W = (n−1)/T); the stream keeps the
// position p (State.Offset), so a resume at another T reads on from where the
// last window ended, neither skipping nor repeating tokens. No shuffle state is
// needed to resume.
type fileSource struct {
	path    string
	f       *os.File
	width   int   // bytes per token: 1, 2 or 4
	windows int64 // W
	tokens  int64 // n, the file's length in tokens
	vocab   int64
	buf     []byte
	// Packed documents (pack.go): the separator and the windows; wins is nil
	// without --doc-sep.
	sep  int64
	wins []window
}

func openFile(path string, width int, o Options) (source, error) {
	f, err := userfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, fserr.Cause(err))
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	size := st.Size()
	if size%int64(width) != 0 {
		f.Close()
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of %d-byte tokens", path, size, width)
	}
	n := size / int64(width)
	t := int64(o.SeqLen)
	if n < t+1 {
		f.Close()
		return nil, fmt.Errorf("%s: %d tokens; seq len %d needs at least %d", path, n, t, t+1)
	}
	s := &fileSource{path: path, f: f, width: width, windows: (n - 1) / t, tokens: n, vocab: o.Vocab,
		buf: make([]byte, (t+1)*int64(width))}
	if err := s.checkVocab(size, o.Log); err != nil {
		f.Close()
		return nil, err
	}
	if o.PackDocs {
		s.sep, s.tokens = o.DocSep, n
		if s.wins, err = s.packWindows(n, t, o.DocSep); err != nil {
			f.Close()
			return nil, err
		}
	}
	return s, nil
}

// scanChunk is what checkVocab reads at a time: its memory, whatever the
// file's size (a multiple of every token width).
const scanChunk = 1 << 20

// progressBytes is the size past which checkVocab reports its progress.
var progressBytes int64 = 256 << 20

// checkVocab reads the file's size bytes once, in order, and returns an error
// for its first token outside the vocabulary, so that a bad file fails when
// opened, not when training reaches the token. A large file gets progress
// lines on log (nil: none).
func (s *fileSource) checkVocab(size int64, log io.Writer) error {
	if s.width < 8 && s.vocab >= 1<<(8*s.width) {
		return nil // every id the width holds is in the vocabulary
	}
	if log == nil || size <= progressBytes {
		log = io.Discard
	}
	fmt.Fprintf(log, "data: %s: checking %d MiB of token ids against the vocabulary of %d\n", s.path,
		size>>20, s.vocab)
	t0, reported := time.Now(), int64(0)
	buf := make([]byte, scanChunk)
	for off := int64(0); off < size; {
		chunk := buf[:min(int64(len(buf)), size-off)]
		if _, err := io.ReadFull(io.NewSectionReader(s.f, off, int64(len(chunk))), chunk); err != nil {
			return fmt.Errorf("%s: reading at byte offset %d: %w", s.path, off, err)
		}
		for i := range int64(len(chunk) / s.width) {
			if tok := s.token(chunk, i); tok >= s.vocab {
				return s.outside(tok, off+i*int64(s.width))
			}
		}
		off += int64(len(chunk))
		if tenth := 10 * off / size; tenth > reported && off < size {
			reported = tenth
			fmt.Fprintf(log, "data: %s: %d%% checked\n", s.path, 10*tenth)
		}
	}
	fmt.Fprintf(log, "data: %s: every token id is in the vocabulary (%.1f s)\n", s.path,
		time.Since(t0).Seconds())
	return nil
}

// token decodes token i of buf.
func (s *fileSource) token(buf []byte, i int64) int64 {
	switch s.width {
	case 1:
		return int64(buf[i])
	case 2:
		return int64(binary.LittleEndian.Uint16(buf[2*i:]))
	}
	return int64(binary.LittleEndian.Uint32(buf[4*i:]))
}

// outside is the error of token tok, at byte offset off, outside the vocabulary.
func (s *fileSource) outside(tok, off int64) error {
	return fmt.Errorf("%s: token %d at byte offset %d is outside the model's vocabulary [0, %d)",
		s.path, tok, off, s.vocab)
}

func (s *fileSource) sequence(off int64, _ *RNG, ids, labels []int64) (int64, error) {
	t := int64(len(ids))
	if off+t+1 > s.tokens {
		off = 0
	}
	start := off * int64(s.width)
	if _, err := s.f.ReadAt(s.buf, start); err != nil {
		return 0, fmt.Errorf("%s: reading window at byte offset %d: %w", s.path, start, err)
	}
	for i := int64(0); i <= t; i++ {
		// Checked at open; checked again, cheaply, in case the file changed since.
		tok := s.token(s.buf, i)
		if tok >= s.vocab {
			return 0, s.outside(tok, start+i*int64(s.width))
		}
		if i < t {
			ids[i] = tok
		}
		if i > 0 {
			labels[i-1] = tok
		}
	}
	return off + t, nil
}

func (s *fileSource) close() error { return s.f.Close() }
