package exec

import (
	"errors"
	"fmt"
	"sync"
	"time"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// ErrClosed is returned by Session.Run after Session.Close.
var ErrClosed = errors.New("exec: session is closed")

// errNoDevice is the error of a run without a device.
var errNoDevice = errors.New("exec: no GPU device (open one with runtime/cuda.Open)")

// Session runs functions on one GPU and keeps, per *ir.Func (by pointer), what
// does not depend on the inputs' values: the generated program and its arena
// plan, the loaded kernel modules, the arena itself, and the parameters' Data and
// the constants once uploaded. The stream and the cuBLASLt handle (with its
// planned GEMM shapes) are shared by all the session's functions. A training loop
// that runs the same three functions every step so pays for code generation,
// module loading and allocation once.
//
// Each Run still uploads every tensor passed in its inputs (the caller may have
// new values in the same tensor), poisons the computed buffers when
// Options.Poison is set, launches every step and downloads the outputs.
//
// Contract: a Func must not be edited while a session holds it, and the Data of
// its parameters and the values of its constants must not be changed in place
// (assigning a new tensor to Param.Data is seen and uploaded). A Func whose
// parameter, node or output count changed is rebuilt, but other edits are not
// detected.
//
// Errors: a Run that fails leaves the session usable. Bad inputs, code
// generation, compile, load and allocation errors cache nothing for that Func
// and free what they allocated; an error while uploading, launching or
// downloading keeps the Func's program but uploads all its parameters and
// constants again on the next run. A kernel fault, though, leaves CUDA's context
// unusable, so every later call fails with it; Close then releases what it can.
// A Session is safe for concurrent use; its runs are serialised.
type Session struct {
	dev  *cuda.Device
	opts Options

	mu     sync.Mutex
	closed bool
	cache  *cuda.Cache
	stream *cuda.Stream
	copy   *cuda.Stream // offload's copies, created on first need
	blas   *cuda.BlasLt
	funcs  map[*ir.Func]*runner
	prof   *profiler
	// adopted holds the programs the compiler made for a Func (Adopt): those run
	// as they are, never generated again.
	adopted map[*ir.Func]*codegen.Program
}

// NewSession returns a session on dev with opts for all its runs. It allocates
// nothing until the first Run; a nil dev makes every Run an error. The session
// does not own dev: Close the session before the device.
func NewSession(dev *cuda.Device, opts Options) *Session {
	return &Session{dev: dev, opts: opts, funcs: map[*ir.Func]*runner{}, adopted: map[*ir.Func]*codegen.Program{}}
}

// Adopt makes prog, the program driver compiled from f for its target, the one
// every Run and Bind of f executes: its kernels, launch plan and arena layout
// are what the program hash covers, so the session runs them as they are rather
// than generating f's code again for the GPU it finds. A program this GPU cannot
// run (a kernel built for another architecture) is refused here, naming the
// kernel and the architectures, before anything is allocated.
func (s *Session) Adopt(f *ir.Func, prog *codegen.Program) error {
	if s == nil || s.dev == nil {
		return errNoDevice
	}
	if f == nil || prog == nil || prog.Plan == nil {
		return errors.New("exec: Adopt needs a Func and its compiled program")
	}
	if err := s.GPU().Runs(prog); err != nil {
		return err
	}
	if st := s.storage().String(); prog.Plan.Storage != st {
		return fmt.Errorf("exec: func @%s was compiled for %s storage, and this session runs %s "+
			"(compile with the --precision the run uses)", f.Name, prog.Plan.Storage, st)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if r := s.funcs[f]; r != nil {
		return fmt.Errorf("exec: Adopt of func @%s after it ran in this session", f.Name)
	}
	s.adopted[f] = prog
	return nil
}

// ProgramOf is the program the session runs for f: the adopted one, or the one
// it generated at f's first run (nil before).
func (s *Session) ProgramOf(f *ir.Func) *codegen.Program {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.funcs[f]; r != nil {
		return r.prog
	}
	return s.adopted[f]
}

// GPU is what decides whether a program runs on a device: its name, its own
// architecture and the one programs built for it target. It is a plain value,
// so that the decision (Runs) is made, and tested, without a GPU.
type GPU struct {
	// Name is the device's name ("NVIDIA H200"), for messages.
	Name string
	// Arch is the device's own architecture ("sm_90": Device.Arch).
	Arch string
	// CodegenArch is the architecture a program compiled for this device uses
	// ("sm_90a" on a Hopper GPU with an NVRTC that builds it: Device.CodegenArch).
	CodegenArch string
}

// GPUOf is dev's GPU.
func GPUOf(dev *cuda.Device) GPU {
	return GPU{Name: dev.Name(), Arch: dev.Arch(), CodegenArch: dev.CodegenArch()}
}

// GPU is the session's device as a GPU value (zero without a device).
func (s *Session) GPU() GPU {
	if s == nil || s.dev == nil {
		return GPU{}
	}
	return GPUOf(s.dev)
}

// Runs checks that every kernel of prog has code g builds (cuda.ArchOn):
// portable kernels run on any GPU lcc supports, an architecture-specific one
// (sm_90a) only on its own generation. The error names the first kernel that
// cannot run and the architecture the program was compiled for.
func (g GPU) Runs(prog *codegen.Program) error {
	for _, k := range prog.Kernels {
		if _, err := cuda.ArchOn(g.Arch, k.Arch); err != nil {
			return fmt.Errorf("exec: kernel %s of the program compiled for %s cannot run on %s: %w",
				k.Name, prog.Plan.Arch, g.Name, err)
		}
	}
	return nil
}

// storage is the session's device storage dtype (f32 unless Options say).
func (s *Session) storage() tensor.DType {
	if s.opts.Storage == tensor.Invalid {
		return tensor.F32
	}
	return s.opts.Storage
}

// program is f's program: the adopted one, or, for a Func the compiler gave no
// program for (lcc run and check, tests), one generated for this GPU. It also
// checks the Func's collectives against the session's communicator.
func (s *Session) program(f *ir.Func) (*codegen.Program, error) {
	prog := s.adopted[f]
	if prog == nil {
		copts := codegen.Options{Arch: s.dev.CodegenArch(), Storage: s.opts.Storage,
			ScalarAttention: s.opts.ScalarAttention}
		if s.opts.Comm != nil {
			copts.Rank = s.opts.Comm.Rank() // this rank's build of a sharded program
		}
		var err error
		if prog, err = codegen.Build(f, copts); err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
	}
	if err := checkRanks(f, s.opts.Comm); err != nil {
		return nil, err
	}
	return prog, nil
}

// Run executes f and returns its outputs by name, as RunWith does and with the
// same bits. inputs maps parameter names to tensors; parameters with Data use it
// unless overridden.
func (s *Session) Run(f *ir.Func,
	inputs map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	r, err := s.begin(f)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var host map[int]binding
	if r == nil {
		// First run of f: bind before building anything on the device, so that bad
		// inputs are reported first and cost no allocation.
		prog, err := s.program(f)
		if err != nil {
			return nil, err
		}
		if host, err = bindParams(f, prog.Plan, inputs); err != nil {
			return nil, err
		}
		if r, err = s.build(f, prog); err != nil {
			return nil, err
		}
	} else if host, err = bindParams(f, r.plan, inputs); err != nil {
		return nil, err
	}
	return r.run(f, host)
}

// Launch queues every step of f's program on the session's stream again and
// returns without waiting: no upload, poison or download. The arena holds what
// f's last Run left, so f must have run in this session, and a program whose
// steps overwrite its own parameters sees their new values. It is for timing a
// program with events on Stream; a kernel error surfaces at the next
// synchronisation.
func (s *Session) Launch(f *ir.Func) error {
	if s == nil || s.dev == nil {
		return errNoDevice
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	r := s.funcs[f]
	if r == nil || !r.built(f) {
		return fmt.Errorf("exec: Launch of func @%s before a Run of it in this session", f.Name)
	}
	return r.queue(f)
}

// Stream is the stream every run of the session uses (nil before the first Run).
func (s *Session) Stream() *cuda.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream
}

// ArenaBytes is the size of the arena of f's program in this session (0 if f
// has not run in it).
func (s *Session) ArenaBytes(f *ir.Func) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.funcs[f]
	if r == nil {
		return 0
	}
	var peak int64
	for _, b := range r.plan.Buffers {
		if o := r.offs[b.ID]; o >= 0 {
			peak = max(peak, o+(b.Bytes+arenaAlign-1)/arenaAlign*arenaAlign)
		}
	}
	return peak
}

// begin locks the session for a call on f and returns f's cached runner (nil:
// f must be built). Once begin succeeds the caller holds s.mu and unlocks it.
func (s *Session) begin(f *ir.Func) (*runner, error) {
	if s == nil || s.dev == nil {
		return nil, errNoDevice
	}
	if f == nil {
		return nil, errors.New("exec: a nil *ir.Func")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	r, err := s.runner(f)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return r, nil
}

// runner returns f's cached runner, or nil if f must be built. A runner built for
// a Func that has since changed size is released first.
func (s *Session) runner(f *ir.Func) (*runner, error) {
	r := s.funcs[f]
	if r == nil || r.built(f) {
		return r, nil
	}
	delete(s.funcs, f)
	if err := r.close(); err != nil {
		return nil, fmt.Errorf("exec: releasing the old program of the edited func @%s: %w", f.Name, err)
	}
	return nil, nil
}

// build plans f's arena, checks it fits, loads the kernels and allocates the
// arena, and caches the result. On error it releases what it made.
func (s *Session) build(f *ir.Func, prog *codegen.Program) (*runner, error) {
	offs, peak := PlanArena(prog.Plan)
	free, err := s.dev.FreeMem()
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	if uint64(peak) > free {
		return nil, fmt.Errorf("exec: func @%s needs an arena of %d bytes (%.2f GiB) at its peak, "+
			"but %s has %d bytes (%.2f GiB) free", f.Name, peak, float64(peak)/(1<<30),
			s.dev.Name(), free, float64(free)/(1<<30))
	}
	if err := s.shared(prog.Plan); err != nil {
		return nil, err
	}
	if s.opts.Profile && s.prof == nil {
		s.prof = &profiler{dev: s.dev, byFam: map[string]time.Duration{}, fams: map[string]Family{}}
	}
	r := &runner{dev: s.dev, prog: prog, plan: prog.Plan, offs: offs, opts: s.opts, prof: s.prof,
		stream: s.stream, copy: s.copy, blas: s.blas, resident: map[int]*tensor.Tensor{},
		nParams: len(f.Params), nBody: len(f.Body), nOutputs: len(f.Outputs)}
	r.findWrites(prog.Kernels)
	if err := r.load(prog.Kernels, s.cache); err != nil {
		r.close()
		return nil, err
	}
	if err := r.allocHost(); err != nil {
		r.close()
		return nil, err
	}
	if peak > 0 {
		if r.arena, err = s.dev.Alloc(int(peak)); err != nil {
			r.close()
			return nil, fmt.Errorf("exec: arena of %d bytes: %w", peak, err)
		}
	}
	s.funcs[f] = r
	return r, nil
}

// shared opens the kernel cache and creates the stream, and the cuBLASLt handle
// when plan has a GEMM, on first need.
func (s *Session) shared(plan *codegen.LaunchPlan) error {
	var err error
	if s.cache == nil {
		if s.cache, err = cuda.OpenCache(s.opts.CacheDir); err != nil {
			s.cache = nil
			return fmt.Errorf("exec: kernel cache: %w", err)
		}
	}
	if s.stream == nil {
		if s.stream, err = s.dev.NewStream(); err != nil {
			s.stream = nil
			return fmt.Errorf("exec: %w", err)
		}
	}
	if s.copy == nil && hasCopies(plan) {
		if s.copy, err = s.dev.NewStream(); err != nil {
			s.copy = nil
			return fmt.Errorf("exec: copy stream: %w", err)
		}
	}
	if s.blas != nil {
		return nil
	}
	for _, st := range plan.Steps {
		if st.Kind == "gemm" {
			if s.blas, err = s.dev.NewBlasLt(); err != nil {
				s.blas = nil
				return fmt.Errorf("exec: %w", err)
			}
			break
		}
	}
	return nil
}

// Release waits for queued work and frees f's program, arena and bindings, so
// that a session that moves on to another Func (the next stage of progressive
// length training, a longer program) does not hold both arenas. A later Run of
// f builds it again; its adopted program is forgotten too.
func (s *Session) Release(f *ir.Func) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.adopted, f)
	r := s.funcs[f]
	if r == nil {
		return nil
	}
	delete(s.funcs, f)
	if s.stream != nil {
		if err := s.stream.Synchronize(); err != nil {
			return err
		}
	}
	return r.close()
}

// Close waits for queued work, unloads every module and frees every allocation
// the session made. It is safe to call more than once; later Runs return
// ErrClosed. An error joins every release that failed; the others still ran.
func (s *Session) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.stream != nil {
		errs = append(errs, s.stream.Synchronize())
	}
	if s.copy != nil {
		errs = append(errs, s.copy.Synchronize()) // before the host blocks are freed
	}
	for f, r := range s.funcs {
		if err := r.close(); err != nil {
			errs = append(errs, fmt.Errorf("func @%s: %w", f.Name, err))
		}
	}
	s.funcs = nil
	if s.prof != nil {
		s.prof.close()
	}
	if s.blas != nil {
		errs = append(errs, s.blas.Close())
		s.blas = nil
	}
	if s.stream != nil {
		errs = append(errs, s.stream.Destroy())
		s.stream = nil
	}
	if s.copy != nil {
		errs = append(errs, s.copy.Destroy())
		s.copy = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("exec: closing the session: %w", err)
	}
	return nil
}
