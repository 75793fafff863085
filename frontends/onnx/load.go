package onnx

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/internal/userfile"
)

// The opset range of the default domain that lcc reads. Up to SemanticsOpset
// every op follows that version; past it, ops ONNX changed are checked one by one
// (newerVersions).
const (
	MinOpset = 13
	MaxOpset = 28
)

// Default limits of LoadOptions.
const (
	// DefaultMaxFileBytes is protobuf's limit for one message (2 GiB); larger
	// models must keep their weights in external data.
	DefaultMaxFileBytes = 2 << 30
	// DefaultMaxExternalBytes bounds the external data read for one model (64 GiB).
	DefaultMaxExternalBytes = 64 << 30
)

// Sentinel errors wrapped by the errors Load and Decode return.
var (
	// ErrMalformed: the bytes are not a well-formed ONNX model (empty file,
	// protobuf parse error, missing graph, bad field values).
	ErrMalformed = errors.New("malformed ONNX model")
	// ErrUnsupported: well-formed ONNX that lcc does not handle (dtype, opset,
	// segmented or sparse tensors).
	ErrUnsupported = errors.New("unsupported ONNX feature")
	// ErrInvalidGraph: the graph breaks ONNX's rules (undefined value, value
	// defined twice, cycle).
	ErrInvalidGraph = errors.New("invalid ONNX graph")
	// ErrUnsafePath: an external data location outside the model's folder.
	ErrUnsafePath = errors.New("unsafe external data location")
	// ErrTooLarge: a file, tensor or external data total over a limit.
	ErrTooLarge = errors.New("too large")
)

// LoadOptions tunes Load and Decode. The zero value is ready to use.
type LoadOptions struct {
	// Source names the model in error messages; Load sets it to the path when
	// empty, Decode uses "ONNX model" when empty.
	Source string
	// MaxFileBytes caps the size of the model file (default DefaultMaxFileBytes).
	MaxFileBytes int64
	// MaxExternalBytes caps the external data read in total (default
	// DefaultMaxExternalBytes).
	MaxExternalBytes int64
}

func (o LoadOptions) withDefaults() LoadOptions {
	if o.Source == "" {
		o.Source = "ONNX model"
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxExternalBytes <= 0 {
		o.MaxExternalBytes = DefaultMaxExternalBytes
	}
	return o
}

// Load reads, decodes and validates the ONNX model at path. External data
// locations are resolved relative to the folder holding path.
func Load(path string, opts LoadOptions) (*Model, error) {
	if opts.Source == "" {
		opts.Source = path
	}
	opts = opts.withDefaults()
	f, err := userfile.Open(path)
	if errors.Is(err, userfile.ErrNotRegular) {
		return nil, fmt.Errorf("onnx: %s: %w: %w", opts.Source, ErrMalformed, fserr.Cause(err))
	}
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if st.Size() > opts.MaxFileBytes {
		return nil, fmt.Errorf("onnx: %s: %w: file is %d bytes, more than the limit of %d "+
			"(keep weights in external data)", opts.Source, ErrTooLarge, st.Size(), opts.MaxFileBytes)
	}
	// One buffer of the size Stat gave and one byte more, to see a file that
	// grew after Stat (io.ReadAll would grow it by doubling: up to twice the
	// file in garbage, on top of an inline model's host peak); a larger file
	// is read on to the limit, a shorter one is what it is.
	data := make([]byte, st.Size()+1)
	n, err := io.ReadFull(f, data)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		data = data[:n]
	case err != nil:
		return nil, fmt.Errorf("onnx: %s: %w", opts.Source, err)
	default:
		rest, err := io.ReadAll(io.LimitReader(f, opts.MaxFileBytes+1-int64(n)))
		if err != nil {
			return nil, fmt.Errorf("onnx: %s: %w", opts.Source, err)
		}
		data = append(data, rest...)
	}
	return Decode(data, filepath.Dir(path), opts)
}

// Decode decodes and validates an ONNX model held in data. dir is the folder
// external data locations are relative to; with dir "" a model that has external
// data is refused.
func Decode(data []byte, dir string, opts LoadOptions) (*Model, error) {
	opts = opts.withDefaults()
	d := &decoder{opts: opts, dir: dir}
	defer d.close()
	m, err := d.decode(data)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", opts.Source, err)
	}
	return m, nil
}

// collectFileBytes is the file size from which decode collects the file's
// bytes once they are parsed.
const collectFileBytes = 64 << 20

// decoder holds the state of one Decode call.
type decoder struct {
	opts LoadOptions
	dir  string
	ext  *extFiles // opened lazily by the first external tensor
	// extRead counts external bytes read, against opts.MaxExternalBytes.
	extRead int64
	// buf is the chunk external data is read through (extChunk bytes).
	buf []byte
}

func (d *decoder) close() {
	if d.ext != nil {
		d.ext.close()
	}
}

func (d *decoder) decode(data []byte) (*Model, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: file is empty", ErrMalformed)
	}
	if int64(len(data)) > d.opts.MaxFileBytes {
		return nil, fmt.Errorf("%w: model is %d bytes, more than the limit of %d",
			ErrTooLarge, len(data), d.opts.MaxFileBytes)
	}
	var pb onnxpb.ModelProto
	if err := proto.Unmarshal(data, &pb); err != nil {
		return nil, fmt.Errorf("%w: not an ONNX protobuf (truncated or corrupt?): %w", ErrMalformed, err)
	}
	if len(data) >= collectFileBytes {
		// The message holds copies of the file's bytes: the file, garbage now
		// (nothing reads data again), is collected before the weights decode
		// beside it, so that an inline model's load holds its weights' bytes
		// once besides the decoded tensors, as the host plan counts
		// (ir.Func.InlineBytes).
		data = nil
		runtime.GC()
	}
	if pb.Graph == nil {
		return nil, fmt.Errorf("%w: the model has no graph (ModelProto.graph is missing)", ErrMalformed)
	}
	if pb.GetIrVersion() <= 0 {
		return nil, fmt.Errorf("%w: ir_version is missing or not positive (%d)", ErrMalformed, pb.GetIrVersion())
	}
	opsets, err := decodeOpsets(pb.GetOpsetImport(), true)
	if err != nil {
		return nil, err
	}
	m := &Model{
		Source:          d.opts.Source,
		IRVersion:       pb.GetIrVersion(),
		ProducerName:    pb.GetProducerName(),
		ProducerVersion: pb.GetProducerVersion(),
		Opsets:          opsets,
	}
	for i, fp := range pb.GetFunctions() {
		f, err := d.decodeFunction(fp)
		if err != nil {
			return nil, fmt.Errorf("function #%d %q: %w", i, fp.GetName(), err)
		}
		if m.Function(f.Domain, f.Name) != nil && f.Overload == "" {
			return nil, fmt.Errorf("%w: function %q in domain %q is defined twice",
				ErrInvalidGraph, f.Name, f.Domain)
		}
		m.Functions = append(m.Functions, *f)
	}
	g, err := d.decodeGraph(pb.Graph)
	if err != nil {
		return nil, err
	}
	m.Graph = *g
	// ONNX requires every node's domain to be imported; a call of a local function
	// is allowed even if its domain is not, as some exporters write it that way.
	for i := range m.Graph.Nodes {
		n := &m.Graph.Nodes[i]
		if _, ok := m.Opsets[n.Domain]; !ok && !m.IsLocalFunction(n.Domain, n.OpType) {
			return nil, fmt.Errorf("%w: %v: domain %q is not imported (ModelProto.opset_import)",
				ErrInvalidGraph, n, n.Domain)
		}
	}
	return m, nil
}

// normDomain writes ai.onnx, the default domain, as "".
func normDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

// decodeOpsets turns opset imports into a map. With checkRange, the default
// domain's version must lie in MinOpset..MaxOpset (functions carry imports too,
// but they are checked only through the model's).
func decodeOpsets(ops []*onnxpb.OperatorSetIdProto, checkRange bool) (map[string]int64, error) {
	out := make(map[string]int64, len(ops))
	for _, op := range ops {
		dom, v := normDomain(op.GetDomain()), op.GetVersion()
		if v <= 0 {
			return nil, fmt.Errorf("%w: opset import for domain %q has version %d", ErrMalformed, dom, v)
		}
		if prev, ok := out[dom]; ok && prev != v {
			return nil, fmt.Errorf("%w: domain %q is imported at both opset %d and %d",
				ErrMalformed, dom, prev, v)
		}
		out[dom] = v
		if dom != "" || !checkRange {
			continue
		}
		if v > MaxOpset {
			return nil, fmt.Errorf("%w: opset %d for domain %q is newer than supported (%d..%d)",
				ErrUnsupported, v, dom, MinOpset, MaxOpset)
		}
		if v < MinOpset {
			return nil, fmt.Errorf("%w: opset %d for domain %q is older than supported (%d..%d); "+
				"re-export the model or convert it with onnx.version_converter",
				ErrUnsupported, v, dom, MinOpset, MaxOpset)
		}
	}
	return out, nil
}
