package data

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/lcc-dev/lcc/internal/userfile"
)

// fileSource reads fixed windows of a token file. Window w covers tokens
// [w·T, w·T + T] (T+1 tokens: T inputs and the target after the last one), so
// consecutive windows share one token and every token but the first is a target
// exactly once per epoch. Sequence k reads window k mod W: the file is read in
// order and wraps around, which needs no shuffle state to resume.
type fileSource struct {
	path    string
	f       *os.File
	width   int   // bytes per token: 1, 2 or 4
	windows int64 // W
	vocab   int64
	buf     []byte
}

func openFile(path string, width int, o Options) (source, error) {
	f, err := userfile.Open(path)
	if err != nil {
		return nil, err
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
	return &fileSource{path: path, f: f, width: width, windows: (n - 1) / t, vocab: o.Vocab,
		buf: make([]byte, (t+1)*int64(width))}, nil
}

func (s *fileSource) sequence(k int64, _ *RNG, ids, labels []int64) error {
	t := int64(len(ids))
	start := (k % s.windows) * t * int64(s.width)
	if _, err := s.f.ReadAt(s.buf, start); err != nil {
		return fmt.Errorf("%s: reading window at byte offset %d: %w", s.path, start, err)
	}
	for i := int64(0); i <= t; i++ {
		var tok int64
		switch s.width {
		case 1:
			tok = int64(s.buf[i])
		case 2:
			tok = int64(binary.LittleEndian.Uint16(s.buf[2*i:]))
		case 4:
			tok = int64(binary.LittleEndian.Uint32(s.buf[4*i:]))
		}
		if tok >= s.vocab {
			return fmt.Errorf("%s: token %d at byte offset %d is outside the model's vocabulary [0, %d)",
				s.path, tok, start+i*int64(s.width), s.vocab)
		}
		if i < t {
			ids[i] = tok
		}
		if i > 0 {
			labels[i-1] = tok
		}
	}
	return nil
}

func (s *fileSource) close() error { return s.f.Close() }
