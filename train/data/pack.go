package data

import (
	"fmt"
	"io"
)

// Packed documents (--doc-sep): the file is a stream of documents, each ending with
// the separator token (the last document may lack it). Windows are made of whole
// documents, packed greedily in file order: a document joins the current window if it
// fits in the T positions left, else it starts the next one. A document longer than
// T is split into pieces of T tokens (the last piece, shorter, starts a window that
// later documents may join). A window's unused tail is padding: separator tokens
// that form a document of their own and carry no target.
//
// Targets never cross documents: labels[t] is the next token of t's document, and
// the separator's own position (whose next token begins another document) holds
// IgnoreIndex, as does padding. Within a piece of a split document the last
// position's target is the file's next token. DocStarts[t] is the window position of
// the first token of t's document, from which the model's positions restart.

// window is a packed window: count tokens of the file from token offset start.
type window struct{ start, count int64 }

// packWindows scans the file's n tokens once, in chunks, and lays out the windows
// of seq positions. It is an error when the separator never occurs.
func (s *fileSource) packWindows(n int64, seq int64, sep int64) ([]window, error) {
	var (
		out     []window
		ws, u   int64 // the open window: first token and tokens used
		docFrom int64 // the current document's first token
		seen    bool
	)
	emit := func(start, count int64) {
		if count > 0 {
			out = append(out, window{start, count})
		}
	}
	endDoc := func(end int64) { // the document [docFrom, end) is complete
		l := end - docFrom
		switch {
		case l > seq:
			emit(ws, u)
			for l > seq {
				emit(docFrom, seq)
				docFrom, l = docFrom+seq, l-seq
			}
			ws, u = docFrom, l
		case u+l > seq:
			emit(ws, u)
			ws, u = docFrom, l
		default:
			u += l
		}
		docFrom = end
	}
	buf := make([]byte, scanChunk)
	per := int64(len(buf) / s.width)
	for off := int64(0); off < n; off += per {
		cnt := min(per, n-off)
		chunk := buf[:cnt*int64(s.width)]
		if _, err := io.ReadFull(io.NewSectionReader(s.f, off*int64(s.width), int64(len(chunk))), chunk); err != nil {
			return nil, fmt.Errorf("%s: reading at byte offset %d: %w", s.path, off*int64(s.width), err)
		}
		for i := range cnt {
			if s.token(chunk, i) == sep {
				seen = true
				endDoc(off + i + 1)
			}
		}
	}
	if !seen {
		return nil, fmt.Errorf("%s: the document separator %d (--doc-sep) never occurs", s.path, sep)
	}
	if docFrom < n {
		endDoc(n)
	}
	emit(ws, u)
	return out, nil
}

// packed fills sequence k of a packed file: window k mod W, its targets and doc starts.
func (s *fileSource) packed(k int64, ids, labels, starts []int64) error {
	w := s.wins[k%int64(len(s.wins))]
	n := w.count
	read := min(n+1, s.tokens-w.start) // one more: the target after a split piece
	buf := s.buf[:read*int64(s.width)]
	if _, err := s.f.ReadAt(buf, w.start*int64(s.width)); err != nil {
		return fmt.Errorf("%s: reading window at byte offset %d: %w", s.path, w.start*int64(s.width), err)
	}
	doc := int64(0)
	for i := range int64(len(ids)) {
		if i >= n { // padding: one document of separators without targets
			ids[i], labels[i], starts[i] = s.sep, IgnoreIndex, n
			continue
		}
		tok := s.token(buf, i)
		if tok >= s.vocab {
			return s.outside(tok, (w.start+i)*int64(s.width))
		}
		ids[i], starts[i], labels[i] = tok, doc, IgnoreIndex
		switch {
		case tok == s.sep:
			doc = i + 1
		case i+1 < read:
			labels[i] = s.token(buf, i+1)
		}
	}
	return nil
}
