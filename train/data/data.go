// Package data produces the token batches lcc trains on: token files, raw bytes,
// and synthetic long-range tasks for tests and demos (docs/design.md §7).
//
// A data spec names the source:
//
//	synthetic:copy[:A]   random tokens (of the first A ids), then the same tokens again
//	synthetic:passkey    filler text with a 5-digit pass key hidden in it, asked at the end
//	tokens:FILE          little-endian uint16 or uint32 token ids (Options.TokenBytes)
//	bytes:FILE           the file's raw bytes as tokens (vocabulary >= 256)
//
// Invariants:
//   - A Stream is a pure function of (spec, options, seed, position): its only
//     state is the number of sequences drawn and one RNG word (State), which a
//     checkpoint records, so a resumed run reads exactly the batches a straight run
//     would have.
//   - Labels are next-token targets aligned with the inputs (labels[t] is the
//     token after input t); positions that carry no target hold IgnoreIndex, the
//     ignore_index of the cross-entropy objective.
//   - Every token is checked against the model's vocabulary; a file token out of
//     range is an error naming the file and its byte offset. A token file is
//     checked whole when opened, in one pass with bounded memory, so a bad id
//     fails the run before its first step, not when training reaches it.
package data

import (
	"fmt"
	"io"
	"strings"

	"github.com/lcc-dev/lcc/tensor"
)

// IgnoreIndex marks label positions that do not count in the loss (PyTorch's
// cross_entropy default).
const IgnoreIndex = -100

// Options says what shape of batches to make and from what.
type Options struct {
	SeqLen, Batch int
	// Vocab bounds every token id: ids are in [0, Vocab).
	Vocab int64
	// Seed seeds the RNG of the synthetic tasks.
	Seed uint64
	// TokenBytes is 2 (uint16) or 4 (uint32) for tokens:FILE; 0 means 2.
	TokenBytes int
	// Log gets the progress of checking a large token file at open (nil: none).
	Log io.Writer
	// PackDocs packs whole documents, split after each DocSep token, into each
	// sequence of a token or bytes file (pack.go), and Batch.DocStarts says where
	// each document starts.
	PackDocs bool
	DocSep   int64
}

// Batch is one step's data: int64 [batch, seq] token ids and next-token labels,
// and with packed documents the position of each token's document start.
type Batch struct {
	InputIDs, Labels *tensor.Tensor
	DocStarts        *tensor.Tensor // nil unless Options.PackDocs
}

// State is where a stream is: what a checkpoint records to resume it.
type State struct {
	Spec string `json:"spec"`
	// Sequences counts the sequences drawn so far (the data position).
	Sequences int64 `json:"sequences"`
	// RNG is the generator's state (RNG.State).
	RNG string `json:"rng"`
	// Offset is the token of a file source where the next window starts (nil
	// for synthetic sources, and in checkpoints older than it, which read window
	// Sequences mod W). It is kept apart from Sequences because a resume at
	// another --seq-len continues the file where the last window ended.
	Offset *int64 `json:"offset,omitempty"`
}

// source makes the next sequence: it fills ids (SeqLen tokens) and labels.
// Synthetic sources draw from rng; file sources ignore it and read the window
// at token off, returning where the next one starts.
type source interface {
	sequence(off int64, rng *RNG, ids, labels []int64) (next int64, err error)
	close() error
}

// Stream produces batches from a source.
type Stream struct {
	spec string
	opts Options
	src  source
	rng  *RNG
	seqs int64
	off  int64 // the file position (State.Offset)
}

// Open parses spec and opens its source. Errors name the spec and say what was
// expected.
func Open(spec string, o Options) (*Stream, error) {
	if o.SeqLen < 2 || o.Batch < 1 {
		return nil, fmt.Errorf("data %q: seq len %d and batch %d: want seq >= 2 and batch >= 1",
			spec, o.SeqLen, o.Batch)
	}
	if o.Vocab < 2 {
		return nil, fmt.Errorf("data %q: vocabulary %d: want >= 2", spec, o.Vocab)
	}
	if o.PackDocs && (o.DocSep < 0 || o.DocSep >= o.Vocab) {
		return nil, fmt.Errorf("data %q: --doc-sep %d is outside the model's vocabulary [0, %d)",
			spec, o.DocSep, o.Vocab)
	}
	kind, arg, ok := strings.Cut(spec, ":")
	if !ok || arg == "" {
		return nil, fmt.Errorf("data %q: want synthetic:copy, synthetic:passkey, tokens:FILE or "+
			"bytes:FILE", spec)
	}
	var (
		src source
		err error
	)
	switch kind {
	case "synthetic":
		if o.PackDocs {
			return nil, fmt.Errorf("data %q: --doc-sep packs the documents of tokens:FILE or bytes:FILE, "+
				"not a synthetic task", spec)
		}
		task, param, _ := strings.Cut(arg, ":")
		switch task {
		case "copy":
			src, err = newCopy(param, o)
		case "passkey":
			if param != "" {
				err = fmt.Errorf("passkey takes no parameter, got %q", param)
				break
			}
			src, err = newPasskey(o)
		default:
			err = fmt.Errorf("unknown synthetic task %q (want copy or passkey)", arg)
		}
	case "tokens":
		tb := o.TokenBytes
		if tb == 0 {
			tb = 2
		}
		if tb != 2 && tb != 4 {
			return nil, fmt.Errorf("data %q: token bytes %d: want 2 (uint16) or 4 (uint32)", spec, tb)
		}
		src, err = openFile(arg, tb, o)
	case "bytes":
		if o.Vocab < 256 {
			return nil, fmt.Errorf("data %q: the model's vocabulary is %d; bytes need >= 256", spec, o.Vocab)
		}
		src, err = openFile(arg, 1, o)
	default:
		err = fmt.Errorf("unknown source %q (want synthetic, tokens or bytes)", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("data %q: %w", spec, err)
	}
	return &Stream{spec: spec, opts: o, src: src, rng: NewRNG(o.Seed)}, nil
}

// Next returns the next batch.
func (s *Stream) Next() (*Batch, error) {
	b, t := int64(s.opts.Batch), int64(s.opts.SeqLen)
	ids, labels := tensor.New(tensor.I64, b, t), tensor.New(tensor.I64, b, t)
	var starts *tensor.Tensor
	if s.opts.PackDocs {
		starts = tensor.New(tensor.I64, b, t)
	}
	for i := range b {
		var next int64
		var err error
		if starts != nil {
			// Packed windows are numbered by sequence (the packing is fixed by
			// the file and --seq-len); the offset stays for State.
			err = s.src.(*fileSource).packed(s.seqs, ids.I[i*t:(i+1)*t], labels.I[i*t:(i+1)*t],
				starts.I[i*t:(i+1)*t])
			next = s.off
		} else {
			next, err = s.src.sequence(s.off, s.rng, ids.I[i*t:(i+1)*t], labels.I[i*t:(i+1)*t])
		}
		if err != nil {
			return nil, fmt.Errorf("data %q: %w", s.spec, err)
		}
		s.seqs, s.off = s.seqs+1, next
	}
	return &Batch{InputIDs: ids, Labels: labels, DocStarts: starts}, nil
}

// State returns the stream's position, for checkpoints.
func (s *Stream) State() State {
	st := State{Spec: s.spec, Sequences: s.seqs, RNG: s.rng.State()}
	if _, ok := s.src.(*fileSource); ok {
		off := s.off
		st.Offset = &off
	}
	return st
}

// Restore moves the stream to a position returned by State on a stream opened
// with the same spec and options but maybe another SeqLen: a file is read on
// from the token after the last window read (see fileSource).
func (s *Stream) Restore(st State) error {
	if st.Spec != s.spec {
		return fmt.Errorf("data: the checkpoint was trained on %q, this run reads %q", st.Spec, s.spec)
	}
	if err := st.Check(); err != nil {
		return err
	}
	s.rng.SetState(st.RNG)
	s.seqs = st.Sequences
	if f, ok := s.src.(*fileSource); ok {
		if st.Offset == nil {
			// Written before Offset: the old streams read window Sequences mod W.
			s.off = st.Sequences % f.windows * int64(s.opts.SeqLen)
		} else if s.off = *st.Offset; s.off < 0 {
			return fmt.Errorf("data: file offset %d: want >= 0", s.off)
		}
	}
	return nil
}

// Check says whether st could be a stream's position: one at or after the
// start, with a valid RNG state. Restore checks the same.
func (st State) Check() error {
	if st.Sequences < 0 {
		return fmt.Errorf("data: position %d: want >= 0", st.Sequences)
	}
	if err := new(RNG).SetState(st.RNG); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	return nil
}

// Windows is the number of windows of a file source before it wraps around
// (W = (n−1)/SeqLen), 0 for synthetic sources.
func (s *Stream) Windows() int64 {
	if f, ok := s.src.(*fileSource); ok {
		return f.windows
	}
	return 0
}

// Close releases the source's file, if any.
func (s *Stream) Close() error { return s.src.close() }
