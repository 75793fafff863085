package data

import (
	"fmt"
	"math"
	"strconv"
)

// copyTask: each sequence is h = SeqLen/2 random tokens followed by the same h
// tokens again (an odd SeqLen ends with one unlabelled filler token 0).
//
// Only targets in the second half are labelled: positions h−1 .. 2h−2 predict
// the copy, everything else is IgnoreIndex. The first half is uniform noise that
// no model can predict, so labelling it would only add a constant ln(V) floor to
// the loss and hide whether the model learned to copy; with these labels the
// loss falls from ln(V) towards 0 exactly as far as the model copies. Position
// h−1 is included: its target (the first copied token) is predictable because
// the length of the first half is fixed.
//
// Tokens are drawn from an alphabet of the first A ids (A = min(vocab,
// DefaultCopyAlphabet) unless the spec says synthetic:copy:A), as the copy tasks
// of the state-space-model literature do (Gu and Dao, "Mamba", 2023, §4.1.1, use
// 16 tokens): an untrained model starts near ln(vocab), chance on the alphabet is
// ln(A), and only copying gets below that.
type copyTask struct{ alphabet int64 }

// DefaultCopyAlphabet is synthetic:copy's alphabet size when the spec gives none.
const DefaultCopyAlphabet = 16

func newCopy(arg string, o Options) (source, error) {
	if o.SeqLen < 4 {
		return nil, fmt.Errorf("copy needs seq len >= 4, got %d", o.SeqLen)
	}
	a := min(o.Vocab, DefaultCopyAlphabet)
	if arg != "" {
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || n < 2 || n > o.Vocab {
			return nil, fmt.Errorf("copy alphabet %q: want an integer in [2, vocabulary %d]", arg, o.Vocab)
		}
		a = n
	}
	return copyTask{alphabet: a}, nil
}

func (c copyTask) sequence(off int64, rng *RNG, ids, labels []int64) (int64, error) {
	h := len(ids) / 2
	for i := range h {
		ids[i] = rng.IntN(c.alphabet)
		ids[h+i] = ids[i]
	}
	for i := 2 * h; i < len(ids); i++ {
		ids[i] = 0
	}
	for i := range labels {
		labels[i] = IgnoreIndex
	}
	for i := h - 1; i < 2*h-1; i++ {
		labels[i] = ids[i+1]
	}
	return off, nil
}

func (copyTask) close() error { return nil }

// passkeyTask is the pass-key retrieval test of Mohtashami and Jaggi ("Landmark
// Attention", 2023), in ASCII so that byte-level and token-level models read the
// same text: repeated filler sentences, the needle "The pass key is NNNNN. " at a
// random place, and at the end "What is the pass key? NNNNN". Only the five
// answer digits are labelled, so the loss measures retrieval alone.
type passkeyTask struct{}

const (
	passkeyFiller = "The grass is green. The sky is blue. The sun is yellow. " +
		"Here we go. There and back again. "
	passkeyDigits   = 5
	passkeyNeedle   = "The pass key is " // + digits + ". "
	passkeyQuestion = "What is the pass key? "
)

// passkeyMinSeq leaves room for the needle, the question and a little filler.
const passkeyMinSeq = len(passkeyNeedle) + passkeyDigits + 2 + len(passkeyQuestion) +
	passkeyDigits + 8

func newPasskey(o Options) (source, error) {
	if o.Vocab < 128 {
		return nil, fmt.Errorf("passkey is ASCII text and needs a vocabulary >= 128, got %d", o.Vocab)
	}
	if o.SeqLen < passkeyMinSeq {
		return nil, fmt.Errorf("passkey needs seq len >= %d, got %d", passkeyMinSeq, o.SeqLen)
	}
	return passkeyTask{}, nil
}

func (passkeyTask) sequence(off int64, rng *RNG, ids, labels []int64) (int64, error) {
	digits := passkeyDraw(rng)
	at := int(rng.IntN(int64(passkeyFillerLen(len(ids)) + 1))) // filler characters before the needle
	passkeyText(ids, digits, at, int(rng.IntN(int64(len(passkeyFiller)))))
	for i := range labels {
		labels[i] = IgnoreIndex
	}
	// The answer digits are the last five tokens; each is the target of the
	// position before it.
	n := len(ids)
	for i := n - passkeyDigits - 1; i < n-1; i++ {
		labels[i] = ids[i+1]
	}
	return off, nil
}

// passkeyDraw draws the five digits of a pass key.
func passkeyDraw(rng *RNG) []byte {
	digits := make([]byte, passkeyDigits)
	for i := range digits {
		digits[i] = byte('0' + rng.IntN(10))
	}
	return digits
}

// passkeyFillerLen is the number of filler characters in a sequence of n tokens.
func passkeyFillerLen(n int) int {
	return n - len(passkeyNeedle) - passkeyDigits - 2 - len(passkeyQuestion) - passkeyDigits
}

// passkeyText writes the sequence into ids: at filler characters (the filler
// read from its character start on), the needle with digits, the rest of the
// filler, the question and the digits.
func passkeyText(ids []int64, digits []byte, at, start int) {
	needle := passkeyNeedle + string(digits) + ". "
	question := passkeyQuestion + string(digits)
	filler := passkeyFillerLen(len(ids))
	text := make([]byte, 0, len(ids))
	for i := range at {
		text = append(text, passkeyFiller[(start+i)%len(passkeyFiller)])
	}
	text = append(text, needle...)
	for i := at; i < filler; i++ {
		text = append(text, passkeyFiller[(start+i)%len(passkeyFiller)])
	}
	text = append(text, question...)
	for i, ch := range text {
		ids[i] = int64(ch)
	}
}

// PasskeyDigits is the number of digits of a pass key: the last tokens of a
// synthetic:passkey sequence.
const PasskeyDigits = passkeyDigits

// PasskeyMinSeq is the shortest pass-key sequence.
const PasskeyMinSeq = passkeyMinSeq

// Passkey writes into ids a synthetic:passkey sequence whose needle starts
// after the fraction depth (0: first, 1: last) of its filler, as the
// needle-in-a-haystack evaluations place it, with digits and the filler's
// start drawn from rng. Its last PasskeyDigits tokens are the key's digits,
// each the target of the position before it.
func Passkey(ids []int64, depth float64, rng *RNG) error {
	if len(ids) < passkeyMinSeq {
		return fmt.Errorf("passkey needs seq len >= %d, got %d", passkeyMinSeq, len(ids))
	}
	if !(depth >= 0 && depth <= 1) {
		return fmt.Errorf("passkey depth %v: want 0..1", depth)
	}
	digits := passkeyDraw(rng)
	filler := passkeyFillerLen(len(ids))
	passkeyText(ids, digits, int(math.Round(depth*float64(filler))), int(rng.IntN(int64(len(passkeyFiller)))))
	return nil
}

func (passkeyTask) close() error { return nil }
