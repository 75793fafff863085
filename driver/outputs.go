package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/internal/atomicfile"
	"github.com/lcc-dev/lcc/internal/folder"
	"github.com/lcc-dev/lcc/ir"
)

// OutputFiles are the files and folders (with a trailing slash) lcc compile -o
// may write, in the order the CLI lists them (the README's table lists the same),
// manifest.json aside. A compiled folder holds no other file of these names
// than the manifest lists.
var OutputFiles = []string{"graph.lcc", "weights.safetensors", "report.json", "kernels/",
	"launch_plan.json", "constants.safetensors", "rank.lcc", "graph.onnx", "graph.dot", "memory.png"}

// OutputOptions says what WriteFolder writes besides the program's own files.
type OutputOptions struct {
	// Emit asks for "onnx" (graph.onnx) and "dot" (graph.dot).
	Emit []string
	// Extra, when set, writes more files into the folder being written (given
	// as dir) before it is sealed: lcc compile draws memory.png there.
	Extra func(dir string) error
}

// WriteFolder writes a compiled program to the folder dir: graph.lcc,
// weights.safetensors and report.json; with a program, kernels/,
// launch_plan.json and constants.safetensors (for a sharded plan, those of the
// rank the report names, whose program is rank.lcc); what opts asks for; and
// last manifest.json, which records the program hash and every file. The folder
// is written beside dir and swapped in whole under a lock (package
// internal/folder), so nothing of an earlier compile survives and a failure
// leaves dir as it was. A dir that exists, is not empty and has no manifest is
// refused: lcc replaces only folders it wrote.
func WriteFolder(dir string, res *Result, opts OutputOptions) error {
	for _, e := range opts.Emit {
		if e != "onnx" && e != "dot" {
			return fmt.Errorf("--emit %q: want onnx or dot", e)
		}
	}
	js, err := json.MarshalIndent(res.Report, "", "  ")
	if err != nil {
		return err
	}
	weights, err := EncodeWeights(res.Func)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"graph.lcc":           []byte(ir.Print(res.Func)),
		"weights.safetensors": weights,
		"report.json":         append(js, '\n'),
	}
	for _, e := range opts.Emit {
		switch e {
		case "onnx":
			if files["graph.onnx"], err = onnx.Export(res.Func); err != nil {
				return err
			}
		case "dot":
			files["graph.dot"] = []byte(ir.DOT(res.Func))
		}
	}
	if res.Sharded != nil {
		files["rank.lcc"] = []byte(ir.Print(res.Sharded.Func))
	}
	return folder.Write(dir, res.Hash, func(tmp string) error {
		if res.Program != nil {
			if err := cudagen.WriteKernels(tmp, res.Program.Kernels, res.Program.Plan); err != nil {
				return err
			}
		}
		for name, data := range files {
			if err := atomicfile.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
				return err
			}
		}
		if opts.Extra != nil {
			return opts.Extra(tmp)
		}
		return nil
	})
}

// VerifyFolder checks a compiled folder against its manifest.json: every file
// the compile wrote is there unchanged, and none of OutputFiles' places holds a
// file it did not write. The error names the file ("out/kernels/k12.cu: edited
// since compile (sha256 mismatch with manifest.json)"). A folder without a
// manifest is an error wrapping folder.ErrNoManifest (a text IR file outside a compiled folder loads unverified).
func VerifyFolder(dir string) error { return folder.Verify(dir, OutputFiles) }

// sealed is what a compiled folder holds for a .lcc model in one: its manifest,
// read once per compile and passed on, and its GPU program (nil for a CPU
// target's folder) as written, which VerifyFolder checked when the model loaded.
type sealed struct {
	manifest *folder.Manifest
	prog     *cudagen.Program
}

// readSealed reads the compiled folder model lies in; nil for a model that is
// not a .lcc file in a compiled folder (no manifest).
func readSealed(model string) (*sealed, error) {
	if !strings.EqualFold(filepath.Ext(model), ".lcc") {
		return nil, nil
	}
	dir := filepath.Dir(model)
	m, err := folder.Read(dir)
	if errors.Is(err, folder.ErrNoManifest) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	s := &sealed{manifest: m}
	if _, err := os.Stat(filepath.Join(dir, "launch_plan.json")); errors.Is(err, fs.ErrNotExist) {
		return s, nil // a CPU target's folder: no GPU program
	}
	if s.prog, err = cudagen.ReadProgram(dir); err != nil {
		return nil, err
	}
	return s, nil
}

// check refuses to run the step read from a compiled folder's graph.lcc as any
// program but the one the folder holds: the program of these flags (hash; nil
// prog: a CPU target, which runs the verified IR itself) must be the
// manifest's, so the kernels and launch plan that run are byte for byte the
// folder's files that VerifyFolder checked.
func (s *sealed) check(model, hash string, prog *cudagen.Program) error {
	if s == nil || prog == nil || s.manifest.Program == hash {
		return nil
	}
	return fmt.Errorf("%s: these flags make program %s, but %s holds program %s (compiled for "+
		"another --target, --precision or --rank, or a sharded plan's rank): give the flags it was "+
		"compiled with, or compile it again", model, hash, filepath.Join(filepath.Dir(model),
		folder.ManifestName), s.manifest.Program)
}

// verifySealed verifies the folder holding a .lcc file when it is a compiled
// folder (has a manifest); a text IR file elsewhere loads as it is.
func verifySealed(path string) error {
	err := VerifyFolder(filepath.Dir(path))
	if errors.Is(err, folder.ErrNoManifest) {
		return nil
	}
	return err
}
