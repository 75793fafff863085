// Package flash runs lcc's tensor-core attention kernels (codegen/cuda/flash) on
// device buffers, outside an executor plan: dense and grouped-query attention,
// ring blocks (position offsets plus the fp32 (o, lse) merge) and LongNet dilated
// attention (one strided branch kernel per (w, r), merged in fp32, with the exact
// backward of docs/design.md §3). Its one user is package perf, whose
// benchmarks time them beside their PyTorch anchors; a compiled program calls the same kernels through its plan.
//
// Every buffer is a device pointer in the attention op's layout: q, o, dq, do
// [B,T,Hq,D] bf16; k, v, dk, dv [B,S,Hkv,D] bf16; lse and delta [B,Hq,T] fp32.
package flash

import (
	"errors"
	"fmt"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// kernel is one loaded kernel with its launch shape.
type kernel struct {
	k  fk.Kernel
	fn *cuda.Function
}

func (k *kernel) launch(s *cuda.Stream, args ...any) error {
	return k.fn.Launch(k.k.Grid, k.k.Block, k.k.Shared, s, args...)
}

// loader compiles (through the cache) and loads kernels, and unloads them all.
type loader struct {
	dev   *cuda.Device
	cache *cuda.Cache
	mods  []*cuda.Module
}

func (l *loader) load(k fk.Kernel) (*kernel, error) {
	arch, err := l.dev.KernelArch(k.Arch)
	if err != nil {
		return nil, fmt.Errorf("flash: kernel %s: %w", k.Name(), err)
	}
	img, err := l.cache.Get(k.Source(), k.Name()+".cu", arch, nil)
	if err != nil {
		return nil, fmt.Errorf("flash: kernel %s: %w", k.Name(), err)
	}
	m, err := l.dev.LoadModule(img)
	if err != nil {
		return nil, fmt.Errorf("flash: loading %s: %w", k.Name(), err)
	}
	l.mods = append(l.mods, m)
	fn, err := m.Function(k.Name())
	if err != nil {
		return nil, err
	}
	if k.Shared > 48<<10 {
		if err := fn.SetMaxDynamicSharedMem(int(k.Shared)); err != nil {
			return nil, fmt.Errorf("flash: %s needs %d bytes of shared memory: %w", k.Name(), k.Shared, err)
		}
	}
	return &kernel{k: k, fn: fn}, nil
}

func (l *loader) close() error {
	var errs []error
	for _, m := range l.mods {
		errs = append(errs, m.Unload())
	}
	l.mods = nil
	return errors.Join(errs...)
}

// Attention is one dense (or grouped-query, or ring-block) attention shape with
// its kernels loaded.
type Attention struct {
	Desc                 fk.Desc
	ld                   loader
	fwd, delta, dkdv, dq *kernel
	// A fused backward (Desc.Fused) has no dQ kernel: fill zeroes the
	// workspace ws, bound writes the maxima at its end, the dK/dV kernel adds
	// dQ into its fixed-point sum, and conv rounds the sum to bf16.
	fill, bound, conv *kernel
	ws                cuda.DevicePtr
	// With Desc.SplitHeads the dK/dV kernel writes each query head's parts
	// into parts (Desc.SplitWorkspace fp32s), and reduce sums them into dk, dv.
	reduce *kernel
	parts  cuda.DevicePtr
	// Starts is the doc starts [B, T] int64 that the forward and the fused
	// backward read when Desc.Docs (packed documents); the caller owns it.
	Starts cuda.DevicePtr
}

// New renders, compiles and loads the kernels of d on dev; cache may be shared.
func New(dev *cuda.Device, cache *cuda.Cache, d fk.Desc) (*Attention, error) {
	a := &Attention{Desc: d.Defaults(), ld: loader{dev: dev, cache: cache}}
	gens := []func(fk.Desc) (fk.Kernel, error){fk.Forward, fk.Delta, fk.DKDV, fk.DQ}
	dsts := []**kernel{&a.fwd, &a.delta, &a.dkdv, &a.dq}
	fused := a.Desc.Check() == nil && a.Desc.Fused()
	if fused && a.Desc.Accumulate {
		return nil, fmt.Errorf("flash: a fused backward writes dq to bf16: Accumulate (ring blocks) needs the split backward")
	}
	if fused {
		gens, dsts = gens[:3], dsts[:3]
	}
	for i, gen := range gens {
		k, err := gen(d)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("flash: %w", err)
		}
		if *dsts[i], err = a.ld.load(k); err != nil {
			a.Close()
			return nil, err
		}
	}
	if fused {
		nw := a.Desc.DQWorkspace()
		kb, err := fk.DQBound(d)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("flash: %w", err)
		}
		kc, err := fk.ConvertDQ(d)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("flash: %w", err)
		}
		for _, x := range []struct {
			dst **kernel
			k   fk.Kernel
		}{{&a.fill, fk.Fill(nw, 0)}, {&a.bound, kb}, {&a.conv, kc}} {
			if *x.dst, err = a.ld.load(x.k); err != nil {
				a.Close()
				return nil, err
			}
		}
		if a.ws, err = dev.Alloc(int(4 * nw)); err != nil {
			a.Close()
			return nil, fmt.Errorf("flash: dQ workspace of %d bytes: %w", 4*nw, err)
		}
	}
	if a.Desc.SplitHeads {
		kr, err := fk.DKVReduce(d)
		if err == nil {
			a.reduce, err = a.ld.load(kr)
		}
		if err == nil {
			if a.parts, err = dev.Alloc(int(4 * a.Desc.SplitWorkspace())); err != nil {
				err = fmt.Errorf("flash: split heads' workspace of %d bytes: %w", 4*a.Desc.SplitWorkspace(), err)
			}
		}
		if err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// Kernels lists the loaded kernels (forward, delta, dK/dV, then dQ, or the
// fused backward's fill, bound and conversion).
func (a *Attention) Kernels() []fk.Kernel {
	ks := []fk.Kernel{a.fwd.k, a.delta.k, a.dkdv.k}
	for _, k := range []*kernel{a.dq, a.fill, a.bound, a.conv, a.reduce} {
		if k != nil {
			ks = append(ks, k.k)
		}
	}
	return ks
}

// Close unloads the kernels and frees the fused backward's workspace.
func (a *Attention) Close() error {
	for _, p := range []*cuda.DevicePtr{&a.ws, &a.parts} {
		if *p != 0 {
			a.ld.dev.Free(*p)
			*p = 0
		}
	}
	return a.ld.close()
}

// Forward queues o, lse = attention(q, k, v) on s. With Desc.Accumulate, o is
// the fp32 running output and lse the running lse, merged in place (a ring
// block); start them at o = 0, lse = −Inf.
func (a *Attention) Forward(s *cuda.Stream, o, lse, q, k, v cuda.DevicePtr) error {
	return a.fwd.launch(s, a.withDocs(o, lse, q, k, v)...)
}

// withDocs is a masking kernel's arguments: args, then Starts when Desc.Docs.
func (a *Attention) withDocs(args ...any) []any {
	if a.Desc.Docs {
		args = append(args, a.Starts)
	}
	return args
}

// Delta queues delta = rowsum(dO ∘ O), the backward's preprocessing.
func (a *Attention) Delta(s *cuda.Stream, delta, o, do cuda.DevicePtr) error {
	return a.delta.launch(s, delta, o, do)
}

// BackwardWith queues dq, dk, dv from an existing delta (and the lse the
// forward wrote, or the global one of a merged attention). With Desc.Accumulate,
// dq, dk, dv are fp32 sums that the kernels add into.
func (a *Attention) BackwardWith(s *cuda.Stream, dq, dk, dv, q, k, v, lse, delta, do cuda.DevicePtr) error {
	if err := a.DKDV(s, dk, dv, q, k, v, lse, delta, do); err != nil {
		return err
	}
	return a.DQ(s, dq, q, k, v, lse, delta, do)
}

// DKDV queues the dK/dV kernel alone (part of BackwardWith). When the backward
// is fused, it zeroes the dQ sum, writes its bound, and also sums dQ.
func (a *Attention) DKDV(s *cuda.Stream, dk, dv, q, k, v, lse, delta, do cuda.DevicePtr) error {
	if a.dq != nil {
		return a.dkdv.launch(s, dk, dv, q, k, v, do, lse, delta)
	}
	if err := a.fill.launch(s, a.ws); err != nil {
		return err
	}
	if err := a.bound.launch(s, a.ws, do, k, v, delta); err != nil {
		return err
	}
	if a.reduce == nil {
		return a.dkdv.launch(s, a.withDocs(dk, dv, q, k, v, do, lse, delta, a.ws)...)
	}
	pv := a.parts + cuda.DevicePtr(2*a.Desc.SplitWorkspace()) // after dK's parts, in bytes
	if err := a.dkdv.launch(s, a.withDocs(a.parts, pv, q, k, v, do, lse, delta, a.ws)...); err != nil {
		return err
	}
	return a.reduce.launch(s, dk, dv, a.parts, pv)
}

// DQ queues the dQ kernel alone (part of BackwardWith); when the backward is
// fused, the conversion of the dQ sum that DKDV left.
func (a *Attention) DQ(s *cuda.Stream, dq, q, k, v, lse, delta, do cuda.DevicePtr) error {
	if a.dq == nil {
		return a.conv.launch(s, dq, a.ws)
	}
	return a.dq.launch(s, dq, q, k, v, do, lse, delta)
}

// Backward queues the whole backward: delta into the scratch buffer delta
// ([B,Hq,T] fp32), then dK/dV and dQ. Same inputs give bitwise the same outputs.
func (a *Attention) Backward(s *cuda.Stream, dq, dk, dv, q, k, v, o, lse, do, delta cuda.DevicePtr) error {
	if err := a.Delta(s, delta, o, do); err != nil {
		return err
	}
	return a.BackwardWith(s, dq, dk, dv, q, k, v, lse, delta, do)
}
