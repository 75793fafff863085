package targets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/internal/jsonerr"
	"github.com/lcc-dev/lcc/internal/userfile"
)

// maxFileBytes bounds a target file; real ones are a few hundred bytes.
const maxFileBytes = 1 << 20

// fileTarget is one target as written in a file. Pointers tell an absent field from a
// zero one, so that "base" can supply what a file leaves out.
type fileTarget struct {
	// Base names a built-in target whose fields fill the absent ones, so that
	// {"name": "h200x4-mine", "base": "h200x8", "gpus": 4} is a complete target.
	Base                    *string  `json:"base"`
	Name                    *string  `json:"name"`
	GPUs                    *int     `json:"gpus"`
	Arch                    *string  `json:"arch"`
	ComputeCapability       *int     `json:"compute_capability"`
	MemoryBytes             *float64 `json:"memory_bytes"` // float64 so 8.5e10 is accepted
	InterconnectBytesPerSec *float64 `json:"interconnect_bytes_per_sec"`
	PeakBF16FLOPs           *float64 `json:"peak_bf16_flops"`
	PeakFP32FLOPs           *float64 `json:"peak_fp32_flops"`
	HBMBytesPerSec          *float64 `json:"hbm_bytes_per_sec"`
	GPU                     *string  `json:"gpu"`
	// The measured ceilings are optional (0: the data sheet's figures).
	CopyBytesPerSec *float64 `json:"copy_bytes_per_sec"`
	GEMMBF16FLOPs   *float64 `json:"gemm_bf16_flops"`
}

// LoadFile reads targets for --target-file: a JSON object (one target) or a list of
// them. Fields are the JSON names of Target's fields plus an optional "base", a
// built-in target that supplies absent fields. Without a base, compute_capability
// defaults to the arch's and gpu to the arch name; every other field is required.
// Each target is validated; errors name the file, the target and the field.
func LoadFile(path string) ([]Target, error) {
	data, err := userfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("targets: %s: %w", path, fserr.Cause(err))
	}
	ts, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("targets: %s: %w", path, err)
	}
	return ts, nil
}

// Parse is LoadFile on bytes already read; errors do not name a file.
func Parse(data []byte) ([]Target, error) {
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%d bytes is too large for a target file (limit %d)",
			len(data), maxFileBytes)
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) > 0 && (trimmed[0] == '[' || trimmed[0] == '{') {
		if err := json.Unmarshal(data, new(any)); err != nil {
			return nil, jsonerr.Explain(data, err)
		}
	}
	var raws []json.RawMessage
	switch {
	case len(trimmed) == 0:
		return nil, errors.New("empty file, want a JSON object or list of targets")
	case trimmed[0] == '[':
		if err := json.Unmarshal(trimmed, &raws); err != nil {
			return nil, fmt.Errorf("bad JSON: %w", err)
		}
		if len(raws) == 0 {
			return nil, errors.New("empty list of targets")
		}
	case trimmed[0] == '{':
		raws = []json.RawMessage{trimmed}
	default:
		return nil, fmt.Errorf("want a JSON object or list of targets, found %q", clip(trimmed, 16))
	}
	out := make([]Target, 0, len(raws))
	seen := map[string]bool{}
	for i, raw := range raws {
		t, err := parseOne(raw)
		if err != nil {
			label := fmt.Sprintf("entry %d", i+1)
			if t.Name != "" {
				label = fmt.Sprintf("target %q", t.Name)
			}
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("target %q: defined twice", t.Name)
		}
		seen[t.Name] = true
		out = append(out, t)
	}
	return out, nil
}

// parseOne decodes and validates one target. On error the returned Target still
// carries the name when one was found, for the message.
func parseOne(raw json.RawMessage) (Target, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var ft fileTarget
	if err := dec.Decode(&ft); err != nil {
		// The file is well-formed JSON (Parse checked): a field has the wrong kind
		// of value, or is unknown.
		named := Target{}
		var name struct{ Name string }
		if json.Unmarshal(raw, &name) == nil {
			named.Name = name.Name
		}
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return named, fmt.Errorf("field %s", jsonerr.TypeMessage(typ))
		}
		return named, jsonerr.Explain(raw, err)
	}
	var t Target
	if ft.Base != nil {
		b, err := Lookup(*ft.Base)
		if err != nil {
			named := Target{}
			if ft.Name != nil {
				named.Name = *ft.Name
			}
			return named, &FieldError{Field: "base", Msg: err.Error()}
		}
		t = b
		t.Name = ""
	}
	// Each field: take the file's value, else the base's; with neither, "missing".
	setStr := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	setStr(&t.Name, ft.Name)
	setStr(&t.Arch, ft.Arch)
	setStr(&t.GPU, ft.GPU)
	if ft.Name == nil {
		return t, &FieldError{Field: "name", Msg: "missing"}
	}
	if ft.Base == nil {
		if ft.Arch == nil {
			return t, &FieldError{Field: "arch", Msg: "missing"}
		}
		if ft.ComputeCapability == nil {
			t.ComputeCapability = archs[t.Arch] // Validate rejects an unknown arch
		}
		if ft.GPU == nil {
			t.GPU = t.Arch
		}
	}
	if ft.ComputeCapability != nil {
		t.ComputeCapability = *ft.ComputeCapability
	} else if ft.Base != nil && ft.Arch != nil {
		t.ComputeCapability = archs[t.Arch] // a new arch over a base: its own capability
	}
	if ft.GPUs != nil {
		t.GPUs = *ft.GPUs
	}
	if ft.MemoryBytes != nil {
		m := *ft.MemoryBytes
		if m != math.Trunc(m) || m > 1<<53 {
			return t, &FieldError{Field: "memory_bytes",
				Msg: fmt.Sprintf("%g is not a whole number of bytes", m)}
		}
		t.MemoryBytes = int64(m)
	}
	rates := []struct {
		field string
		dst   *float64
		src   *float64
	}{
		{"interconnect_bytes_per_sec", &t.InterconnectBytesPerSec, ft.InterconnectBytesPerSec},
		{"peak_bf16_flops", &t.PeakBF16FLOPs, ft.PeakBF16FLOPs},
		{"peak_fp32_flops", &t.PeakFP32FLOPs, ft.PeakFP32FLOPs},
		{"hbm_bytes_per_sec", &t.HBMBytesPerSec, ft.HBMBytesPerSec},
	}
	if ft.Base == nil {
		switch {
		case ft.GPUs == nil:
			return t, &FieldError{Field: "gpus", Msg: "missing"}
		case ft.MemoryBytes == nil:
			return t, &FieldError{Field: "memory_bytes", Msg: "missing"}
		}
	}
	for _, r := range rates {
		switch {
		case r.src != nil:
			*r.dst = *r.src
		case ft.Base == nil:
			return t, &FieldError{Field: r.field, Msg: "missing"}
		}
	}
	// A base's measured ceiling belongs to its own device: new data-sheet
	// figures drop it unless the file measures again.
	if ft.HBMBytesPerSec != nil {
		t.CopyBytesPerSec = 0
	}
	if ft.PeakBF16FLOPs != nil {
		t.GEMMBF16FLOPs = 0
	}
	if ft.CopyBytesPerSec != nil {
		t.CopyBytesPerSec = *ft.CopyBytesPerSec
	}
	if ft.GEMMBF16FLOPs != nil {
		t.GEMMBF16FLOPs = *ft.GEMMBF16FLOPs
	}
	return t, t.Validate()
}

// clip returns at most n bytes of b, for quoting input in errors.
func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
