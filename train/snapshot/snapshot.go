// Package snapshot saves and restores training state, lcc train's checkpoints on
// disk (activation recompute, which PyTorch also calls checkpointing, is
// passes/recompute.go): the model's weights and the optimizer's state as one
// safetensors file, plus a small JSON file with the step, the data position, the
// lcc version and a hash identifying the model.
//
// Invariants:
//   - Both files are written atomically (temp file in the same directory, fsync,
//     rename, fsync of the directory), the safetensors file first. The JSON file
//     is the commit record: a checkpoint exists once its JSON does, and the JSON
//     holds the SHA-256 of the safetensors bytes, so a crash at any point leaves
//     the previous checkpoints intact and the new one either complete or absent.
//   - Loading trusts nothing: bad JSON, a missing or truncated safetensors file, a
//     hash mismatch, a tensor missing or of the wrong type are errors naming the
//     file. So is a checkpoint at odds with itself (consistent): a step other
//     than its file name's, its optimizer's or its safetensors metadata's, or
//     past the run's recorded --steps; a bad data position; a weight that is
//     empty, not floating point, missing from the recorded provenance or unlike
//     its optimizer state. Every reader (--resume, both lcc export formats) goes
//     through Load, and Latest skips such checkpoints, reporting each, and
//     returns the newest valid one.
//   - Only regular files are read (internal/userfile): a named pipe where a
//     checkpoint file should be is refused, not waited on.
//   - Loading streams the tensors file once, hashing it on the way: it holds
//     at most safetensors.ReadChunkBytes of the file beside the tensors it
//     returns, which are only those a Want names (and may be the caller's own,
//     Want.Into), so that a resume holds the checkpoint's state once, not its
//     bytes and its tensors together (issue #26).
//   - Names: step N is ckpt-NNNNNNNN.json and ckpt-NNNNNNNN.safetensors (8 digits,
//     so names sort by step).
package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/internal/atomicfile"
	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/internal/jsonerr"
	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
	"github.com/lcc-dev/lcc/train/optim"
)

// Format is the version of the JSON layout; Load refuses others.
const Format = 1

// OptimPrefix prefixes the optimizer's state (package optim's names) in the
// safetensors file, away from the weights' names.
const OptimPrefix = "optim."

// Meta is the JSON half of a checkpoint.
type Meta struct {
	Format int `json:"format"`
	// Step is the number of optimizer steps done.
	Step int `json:"step"`
	// Data is the data stream's position and RNG state after Step.
	Data data.State `json:"data"`
	// LCCVersion is the version of lcc that wrote the checkpoint (informative).
	LCCVersion string `json:"lcc_version"`
	// ParamsHash identifies the parameters (weights' and optimizer state's
	// names, dtypes and shapes): see train.ParamsHash. Load refuses a checkpoint
	// whose hash differs from the run's; the program (--seq-len, ...) may differ.
	ParamsHash string `json:"params_sha256"`
	// Tensors is the safetensors file's base name and TensorsSHA256 its digest.
	Tensors       string `json:"tensors"`
	TensorsSHA256 string `json:"tensors_sha256"`
	// Loss is the loss of step Step (informative).
	Loss float64 `json:"loss"`
	// Config holds the run's settings (schedule, optimizer), so that a resumed run
	// can say what changed.
	Config map[string]any `json:"config,omitempty"`
	// Model is the model file the run trained (as given to lcc train).
	Model string `json:"model,omitempty"`
	// Params says, for each weight, which framework parameter it is, so that
	// lcc export can write the weights under the names the framework loads.
	Params map[string]Param `json:"params,omitempty"`
	// Metrics is step Step's --metrics line as far as it is known before the
	// checkpoint is taken: a run that dies after the commit and before writing
	// the line loses it, and its resume restores it from here.
	Metrics json.RawMessage `json:"metrics,omitempty"`
}

// Param is the framework parameter a checkpoint weight stands for: PyTorch's
// state_dict key, from the exporter's provenance (ir.Param.Origin, or the name
// the importer gave the weight from torch.export's graph signature).
type Param struct {
	Name string `json:"name"`
	// Transposed says the weight holds the parameter's transpose (an exporter's
	// folded Linear weight, Wᵀ).
	Transposed bool `json:"transposed,omitempty"`
	// Frozen marks a weight that is not a trained parameter (a constant the
	// exporter stored as an initializer).
	Frozen bool `json:"frozen,omitempty"`
}

// Checkpoint is a loaded checkpoint.
type Checkpoint struct {
	Path string // the JSON file
	Meta Meta
	// Tensors are the tensors Load read: every one of the file's when its Want
	// names none (lcc export, eval), else Want's.
	Tensors map[string]*tensor.Tensor
}

// Weights are c's tensors without the optimizer state (OptimPrefix): the
// model's weights, as eval and export read them. The map is new; the tensors
// are c's.
func (c *Checkpoint) Weights() map[string]*tensor.Tensor {
	ws := map[string]*tensor.Tensor{}
	for name, t := range c.Tensors {
		if !strings.HasPrefix(name, OptimPrefix) {
			ws[name] = t
		}
	}
	return ws
}

// Want is what a checkpoint must hold to resume a given run.
type Want struct {
	ParamsHash string
	// Tensors maps every required tensor name to its type (dtype and shape).
	// When it names any, Load holds only those (and the optimizer's step): the
	// file's other tensors are checked from its header and hashed, not decoded.
	Tensors map[string]ir.Type
	// Into holds, for names among Tensors, host tensors Load decodes the
	// tensor of that name into, in place, when they have its dtype and shape
	// (a resume's model weights),
	// so that loading holds nothing beside them. On an error they may hold part
	// of a file: a caller uses them only once a Load of them succeeded.
	Into map[string]*tensor.Tensor
}

// writeHook, when set by a test, runs after each chunk of a file is written; an
// error aborts the write as a crash would (tests also block in it and kill the
// process).
var writeHook func(path string, written int) error

// writeChunk is how much is written between writeHook calls.
const writeChunk = 64 << 10

// Base returns the path of step's files without extension.
func Base(dir string, step int) string {
	return filepath.Join(dir, fmt.Sprintf("ckpt-%08d", step))
}

// Save writes a checkpoint of step into dir (created if needed) and returns the
// JSON path. m.Step, m.Tensors and m.TensorsSHA256 are filled in by Save.
func Save(dir string, step int, m Meta, tensors map[string]*tensor.Tensor) (string, error) {
	raw, err := safetensors.Encode(nil, tensors, stepMetadata(step))
	if err != nil {
		return "", fmt.Errorf("checkpoint %s: %w", Base(dir, step), err)
	}
	return saveFiles(dir, step, m, [][]byte{raw})
}

// SaveRaw is Save of tensors already in their file bytes, which it writes
// without copying them: the same files as Save of the same tensors.
func SaveRaw(dir string, step int, m Meta, tensors map[string]safetensors.Raw) (string, error) {
	pieces, err := safetensors.EncodeRaw(tensors, stepMetadata(step))
	if err != nil {
		return "", fmt.Errorf("checkpoint %s: %w", Base(dir, step), err)
	}
	return saveFiles(dir, step, m, pieces)
}

// stepMetadata is the safetensors metadata of step's checkpoint.
func stepMetadata(step int) map[string]string { return map[string]string{"step": strconv.Itoa(step)} }

// saveFiles writes the safetensors file (pieces, one after the other), then the JSON.
func saveFiles(dir string, step int, m Meta, pieces [][]byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	atomicfile.RemoveTemps(dir) // a killed writer's leftovers; best effort
	base := Base(dir, step)
	// The digest is computed beside the write: for a large checkpoint each
	// takes seconds.
	digest := make(chan []byte, 1)
	go func() {
		h := sha256.New()
		for _, p := range pieces {
			h.Write(p)
		}
		digest <- h.Sum(nil)
	}()
	err := writeAtomic(base+".safetensors", pieces...)
	sum := <-digest
	if err != nil {
		return "", fmt.Errorf("checkpoint: writing %s.safetensors: %w", base, err)
	}
	m.Format, m.Step = Format, step
	m.Tensors, m.TensorsSHA256 = filepath.Base(base)+".safetensors", hex.EncodeToString(sum[:])
	js, err := json.MarshalIndent(m, "", "  ")
	if err == nil {
		err = writeAtomic(base+".json", append(js, '\n'))
	}
	if err != nil {
		// Without its commit record the tensors file is an orphan no reader
		// takes (a full disk, typically): remove it rather than leave it.
		return "", errors.Join(fmt.Errorf("checkpoint: writing %s.json: %w", base, err),
			removeOrphan(base+".safetensors"))
	}
	return base + ".json", nil
}

// removeOrphan removes the tensors file of a checkpoint whose JSON could not be
// written.
func removeOrphan(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checkpoint: removing %s: %w", path, err)
	}
	return nil
}

// writeAtomic replaces path with the pieces of data one after the other
// (atomicfile.Write), in chunks so that tests can fail or stop the writer
// half-way (writeHook).
func writeAtomic(path string, data ...[]byte) error {
	return atomicfile.Write(path, 0o644, func(w io.Writer) error {
		written := 0
		for _, d := range data {
			for off := 0; off < len(d); off += writeChunk {
				end := min(off+writeChunk, len(d))
				if _, err := w.Write(d[off:end]); err != nil {
					return err
				}
				written += end - off
				if writeHook != nil {
					if err := writeHook(path, written); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
}

var nameRE = regexp.MustCompile(`^ckpt-(\d{8,})\.json$`)

// List returns the JSON paths of the checkpoints in dir, newest step first. A
// missing dir has none.
func List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	type entry struct {
		step int
		path string
	}
	var es []entry
	for _, e := range ents {
		m := nameRE.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		step, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		es = append(es, entry{step, filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(es, func(a, b entry) int { return b.step - a.step })
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.path
	}
	return out, nil
}

// Load reads and validates the checkpoint whose JSON file is path.
func Load(path string, want Want) (*Checkpoint, error) {
	js, err := userfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, fserr.Cause(err))
	}
	var m Meta
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("checkpoint %s: bad JSON: %w", path, jsonerr.Explain(js, err))
	}
	switch {
	case m.Format != Format:
		return nil, fmt.Errorf("checkpoint %s: format %d, this lcc reads format %d", path, m.Format,
			Format)
	case want.ParamsHash != "" && m.ParamsHash != want.ParamsHash:
		return nil, fmt.Errorf("checkpoint %s is of another model (parameters hash %.12s…, "+
			"this model's %.12s…): the names, dtypes or shapes of its weights or optimizer state "+
			"differ (a checkpoint without params_sha256 predates it)", path, m.ParamsHash,
			want.ParamsHash)
	}
	if err := consistentMeta(path, m); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	stPath := filepath.Join(filepath.Dir(path), m.Tensors)
	ts, err := readTensors(stPath, m, want)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return &Checkpoint{Path: path, Meta: m, Tensors: ts}, nil
}

// readTensors reads the tensors file stPath of a checkpoint whose JSON is m
// in one pass, a chunk at a time (safetensors.ReadTensors), hashing every byte
// on the way, and returns the tensors want asks for (all of them when it
// names none), decoded into want.Into's where it has them. Whatever stops the
// read, the rest of the file is hashed: a file that is not the one committed
// is refused as such, not by what its damage looks like.
func readTensors(stPath string, m Meta, want Want) (map[string]*tensor.Tensor, error) {
	f, err := userfile.Open(stPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", stPath, fserr.Cause(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", stPath, err)
	}
	h := sha256.New()
	r := &countingReader{r: io.TeeReader(f, h)}
	ts, readErr := decodeWanted(stPath, r, st.Size(), m, want)
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, fmt.Errorf("%s: %w", stPath, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != m.TensorsSHA256 {
		return nil, fmt.Errorf("%s is corrupt or truncated (%d bytes; SHA-256 differs from the one recorded)",
			stPath, r.n)
	}
	return ts, readErr
}

// decodeWanted reads the tensors file stPath from r (size bytes): its header,
// checked against want and m before any tensor is allocated, then the
// tensors want asks for (and the optimizer's step, which m is checked
// against), each into want.Into's tensor of its name when that has its dtype
// and shape, else into a new one. Other tensors are read past, not held.
func decodeWanted(stPath string, r io.Reader, size int64, m Meta, want Want) (map[string]*tensor.Tensor, error) {
	hd, err := safetensors.ReadHeader(stPath, r, size)
	if err != nil {
		return nil, err
	}
	var missing, wrong []string
	for _, name := range sortedKeys(want.Tensors) {
		e, ok := hd.Entries[name]
		if !ok {
			missing = append(missing, strconv.Quote(name))
			continue
		}
		if wt := want.Tensors[name]; !ir.T(e.DType, e.Shape...).Equal(wt) {
			wrong = append(wrong, fmt.Sprintf("%q is %v%s, want %v", name, e.DType,
				tensor.ShapeString(e.Shape), wt))
		}
	}
	if len(missing) > 0 || len(wrong) > 0 {
		msg := ""
		if len(missing) > 0 {
			msg = "missing tensors " + strings.Join(missing, ", ")
		}
		if len(wrong) > 0 {
			msg = strings.TrimPrefix(msg+"; "+strings.Join(wrong, "; "), "; ")
		}
		return nil, fmt.Errorf("%s: %s", stPath, msg)
	}
	if err := consistentTensors(m, hd); err != nil {
		return nil, fmt.Errorf("%s: %w", stPath, err)
	}
	stepName := OptimPrefix + optim.StepState
	ts := map[string]*tensor.Tensor{}
	err = hd.ReadTensors(r, func(name string) *tensor.Tensor {
		_, wanted := want.Tensors[name]
		if len(want.Tensors) > 0 && !wanted && name != stepName {
			return nil
		}
		e := hd.Entries[name]
		var t *tensor.Tensor
		if wanted {
			t = want.Into[name]
		}
		if t == nil || t.DType != e.DType || !slices.Equal(t.Shape, e.Shape) {
			t = tensor.New(e.DType, e.Shape...)
		}
		ts[name] = t
		return t
	})
	if err != nil {
		return nil, err
	}
	if step := ts[stepName].F[0]; step != float64(m.Step) {
		return nil, fmt.Errorf("%s: optimizer step %v, the JSON's %d", stPath, step, m.Step)
	}
	return ts, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// consistentMeta checks that the JSON of the checkpoint at path agrees with
// itself and with its file's name.
func consistentMeta(path string, m Meta) error {
	name := nameRE.FindStringSubmatch(filepath.Base(path))
	if name == nil {
		return fmt.Errorf("not a checkpoint's name (want ckpt-NNNNNNNN.json)")
	}
	named, err := strconv.Atoi(name[1])
	if err != nil {
		return fmt.Errorf("step %s of the file name: %w", name[1], err)
	}
	if m.Step != named {
		return fmt.Errorf("records step %d, its name step %d", m.Step, named)
	}
	// JSON numbers decode as float64.
	if steps, ok := m.Config["steps"].(float64); ok && float64(m.Step) > steps {
		return fmt.Errorf("records step %d, past the run's --steps %v", m.Step, steps)
	}
	if want := strings.TrimSuffix(filepath.Base(path), ".json") + ".safetensors"; m.Tensors != want {
		return fmt.Errorf("names tensors file %q, want %q", m.Tensors, want)
	}
	if err := m.Data.Check(); err != nil {
		return err
	}
	// Every step draws at least one sequence (--batch and --accumulate are >= 1).
	if m.Data.Sequences < int64(m.Step) {
		return fmt.Errorf("data position %d is before step %d's", m.Data.Sequences, m.Step)
	}
	return nil
}

// consistentTensors checks that a checkpoint's tensors, as its header hd
// has them, agree with its JSON m and with each other: what a resume checks
// against the model, in the terms a reader without the model (lcc export) can
// check. (The optimizer step's value is checked once it is read.)
func consistentTensors(m Meta, hd *safetensors.Header) error {
	if s, ok := hd.Metadata["step"]; ok && s != strconv.Itoa(m.Step) {
		return fmt.Errorf("metadata step %q, the JSON's %d", s, m.Step)
	}
	step, ok := hd.Entries[OptimPrefix+optim.StepState]
	if !ok || step.DType != tensor.F64 || len(step.Shape) != 0 {
		return fmt.Errorf("no optimizer step (an f64[] %q)", OptimPrefix+optim.StepState)
	}
	weights := 0
	for _, name := range hd.Names {
		t := hd.Entries[name]
		if n, _ := tensor.Numel(t.Shape); n == 0 {
			return fmt.Errorf("tensor %q is %v%s, empty", name, t.DType, tensor.ShapeString(t.Shape))
		}
		state, isState := strings.CutPrefix(name, OptimPrefix)
		if !isState {
			weights++
			if _, known := m.Params[name]; m.Params != nil && !known {
				return fmt.Errorf("weight %q is not among the JSON's params (renamed?)", name)
			}
			// A weight with no optimizer state (a constant the exporter stored as an
			// initializer, a weight no gradient reaches) may be an integer.
			_, trained := hd.Entries[OptimPrefix+optim.MasterPrefix+name]
			if !t.DType.IsFloat() && trained {
				return fmt.Errorf("weight %q is %v, not floating point", name, t.DType)
			}
			continue
		}
		for _, prefix := range []string{optim.MasterPrefix, optim.MomentPrefix, optim.VariancePrefix} {
			w, ok := strings.CutPrefix(state, prefix)
			if !ok {
				continue
			}
			wt, has := hd.Entries[w]
			switch {
			case !has:
				return fmt.Errorf("optimizer state %q is of weight %q, which the file lacks (renamed?)",
					name, w)
			case t.DType != tensor.F32 || !slices.Equal(t.Shape, wt.Shape):
				return fmt.Errorf("optimizer state %q is %v%s, want f32%s as its weight", name, t.DType,
					tensor.ShapeString(t.Shape), tensor.ShapeString(wt.Shape))
			}
		}
	}
	for _, name := range sortedKeys(m.Params) {
		if _, ok := hd.Entries[name]; !ok {
			return fmt.Errorf("the JSON's params name weight %q, which the file lacks", name)
		}
	}
	if weights == 0 {
		return errors.New("no weights")
	}
	return nil
}

// Skipped is a checkpoint Latest passed over, and why.
type Skipped struct {
	Path string
	Err  error
}

// Latest returns the newest valid checkpoint in dir (nil when there is none),
// and the newer ones it skipped as invalid.
func Latest(dir string, want Want) (*Checkpoint, []Skipped, error) {
	paths, err := List(dir)
	if err != nil {
		return nil, nil, err
	}
	var skipped []Skipped
	for _, p := range paths {
		c, err := Load(p, want)
		if err == nil {
			return c, skipped, nil
		}
		skipped = append(skipped, Skipped{p, err})
	}
	return nil, skipped, nil
}

// Prune deletes all but the newest keep checkpoints in dir (keep <= 0 keeps
// all). The JSON goes first, so a prune interrupted half-way leaves at worst a
// stray safetensors file, never a JSON that points at nothing.
func Prune(dir string, keep int) error {
	if keep <= 0 {
		return nil
	}
	paths, err := List(dir)
	if err != nil {
		return err
	}
	for _, p := range paths[min(keep, len(paths)):] {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("checkpoint: pruning: %w", err)
		}
		st := strings.TrimSuffix(p, ".json") + ".safetensors"
		if err := os.Remove(st); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("checkpoint: pruning: %w", err)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
