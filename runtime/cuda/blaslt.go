package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/lcc-dev/lcc/tensor"
)

// libcublasLt is cuBLASLt, the GEMM library with explicit algorithm selection.
var libcublasLt = newLibrary("libcublasLt", EnvCublasLt,
	func(c config) string { return c.cublasLt },
	"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so")

// cuBLASLt entry points.
var (
	cublasLtCreate                   = libcublasLt.sym("cublasLtCreate")
	cublasLtDestroy                  = libcublasLt.sym("cublasLtDestroy")
	cublasLtGetStatusString          = libcublasLt.sym("cublasLtGetStatusString")
	cublasLtMatmul                   = libcublasLt.sym("cublasLtMatmul")
	cublasLtMatmulDescCreate         = libcublasLt.sym("cublasLtMatmulDescCreate")
	cublasLtMatmulDescDestroy        = libcublasLt.sym("cublasLtMatmulDescDestroy")
	cublasLtMatmulDescSetAttribute   = libcublasLt.sym("cublasLtMatmulDescSetAttribute")
	cublasLtMatrixLayoutCreate       = libcublasLt.sym("cublasLtMatrixLayoutCreate")
	cublasLtMatrixLayoutDestroy      = libcublasLt.sym("cublasLtMatrixLayoutDestroy")
	cublasLtMatrixLayoutSetAttribute = libcublasLt.sym("cublasLtMatrixLayoutSetAttribute")
	cublasLtMatmulPreferenceCreate   = libcublasLt.sym("cublasLtMatmulPreferenceCreate")
	cublasLtMatmulPreferenceDestroy  = libcublasLt.sym("cublasLtMatmulPreferenceDestroy")
	cublasLtMatmulPreferenceSetAttr  = libcublasLt.sym("cublasLtMatmulPreferenceSetAttribute")
	cublasLtMatmulAlgoGetHeuristic   = libcublasLt.sym("cublasLtMatmulAlgoGetHeuristic")
	cublasLtSymbols                  = []*symbol{cublasLtCreate, cublasLtDestroy,
		cublasLtGetStatusString, cublasLtMatmul, cublasLtMatmulDescCreate,
		cublasLtMatmulDescDestroy, cublasLtMatmulDescSetAttribute, cublasLtMatrixLayoutCreate,
		cublasLtMatrixLayoutDestroy, cublasLtMatrixLayoutSetAttribute,
		cublasLtMatmulPreferenceCreate, cublasLtMatmulPreferenceDestroy,
		cublasLtMatmulPreferenceSetAttr, cublasLtMatmulAlgoGetHeuristic}
)

// Enum values from library_types.h, cublas_api.h and cublasLt.h.
const (
	cudaR32F  = 0  // CUDA_R_32F
	cudaR16F  = 2  // CUDA_R_16F
	cudaR16BF = 14 // CUDA_R_16BF

	// computeF32 is CUBLAS_COMPUTE_32F: fp32 multiply-accumulate with no TF32
	// rounding of inputs (that is CUBLAS_COMPUTE_32F_FAST_TF32, 77). For bf16 and
	// f16 inputs it means fp32 accumulation on tensor cores.
	computeF32 = 68

	opN = 0 // CUBLAS_OP_N
	opT = 1 // CUBLAS_OP_T

	descTransA = 3 // CUBLASLT_MATMUL_DESC_TRANSA, int32

	descTransB = 4 // CUBLASLT_MATMUL_DESC_TRANSB, int32

	layoutBatchCount  = 5 // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32
	layoutBatchStride = 6 // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64

	prefMaxWorkspace = 1 // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64
	prefMinAlignA    = 5 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32; B, C, D follow

	// heuristicResultSize is sizeof(cublasLtMatmulHeuristicResult_t) in cuBLAS 11-13:
	// a 64-byte algo, size_t workspaceSize, int state, float wavesCount, int[4].
	// One result is requested into a larger buffer, so a future growth cannot
	// overrun it.
	heuristicResultSize = 96
)

// blasStatusNames are cublasStatus_t names, for libraries too old for
// cublasLtGetStatusString.
var blasStatusNames = map[int32]string{1: "CUBLAS_STATUS_NOT_INITIALIZED",
	3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}

// lt calls a cuBLASLt entry point and turns a non-zero cublasStatus_t into an error.
//
//go:uintptrescapes
func lt(s *symbol, what string, args ...uintptr) error {
	r, err := s.call(args...)
	if err != nil {
		return err
	}
	code := int32(r)
	if code == 0 {
		return nil
	}
	msg, ok := blasStatusNames[code]
	if !ok {
		msg = "unknown status"
	}
	if p, err := cublasLtGetStatusString.call(uintptr(code)); err == nil && p != 0 {
		msg = goString(p)
	}
	return &Error{Lib: "libcublasLt", Func: s.name, What: what, Code: int(code), Msg: msg}
}

// DefaultWorkspace is the cuBLASLt workspace NewBlasLt allocates; 32 MiB is what
// NVIDIA recommends for Hopper and is ample for Ampere.
const DefaultWorkspace = 32 << 20

// BlasLt is a cuBLASLt handle on one device with its workspace and a cache of
// planned GEMM shapes. Gemm calls may come from several goroutines, but the
// workspace is shared: queue GEMMs of one BlasLt on one stream at a time, or make
// one BlasLt per stream.
type BlasLt struct {
	dev       *Device
	handle    uintptr
	workspace DevicePtr
	wsSize    int

	mu    sync.Mutex
	plans map[gemmKey]*gemmPlan
}

// NewBlasLt creates a cuBLASLt handle on d and allocates DefaultWorkspace bytes.
func (d *Device) NewBlasLt() (*BlasLt, error) {
	b := &BlasLt{dev: d, wsSize: DefaultWorkspace, plans: map[gemmKey]*gemmPlan{}}
	err := d.do(func() error { return lt(cublasLtCreate, "", uintptr(unsafe.Pointer(&b.handle))) })
	if err != nil {
		return nil, err
	}
	if b.workspace, err = d.Alloc(b.wsSize); err != nil {
		b.Close()
		return nil, fmt.Errorf("cuda: cuBLASLt workspace: %w", err)
	}
	return b, nil
}

// Close destroys the planned descriptors, the workspace and the handle.
func (b *BlasLt) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for k, p := range b.plans {
		keep(b.dev.do(p.destroy))
		delete(b.plans, k)
	}
	keep(b.dev.Free(b.workspace))
	b.workspace = 0
	if b.handle != 0 {
		keep(b.dev.do(func() error { return lt(cublasLtDestroy, "", b.handle) }))
		b.handle = 0
	}
	return first
}

// GemmParams describes C = Alpha·op(A)·op(B) + Beta·C over Batch matrices, in
// row-major terms (what lcc's tensors use): op(A) is M×K, op(B) is K×N, C is M×N.
// A is stored M×K, or K×M if TransA; B is stored K×N, or N×K if TransB. Leading
// dimensions count elements between rows; 0 means packed (the stored row length).
// Stride* count elements between consecutive matrices of a batch; 0 reuses one
// matrix for the whole batch (e.g. a weight).
type GemmParams struct {
	TransA, TransB bool
	M, N, K        int
	A, B, C        DevicePtr
	LDA, LDB, LDC  int
	Batch          int // number of matrices; 0 means 1
	StrideA        int64
	StrideB        int64
	StrideC        int64
	// Type is the element type of A and B: tensor.F32, tensor.BF16 or tensor.F16.
	// Accumulation is always fp32.
	Type tensor.DType
	// CType is the element type of C; 0 (tensor.Invalid) means Type. bf16 or f16
	// inputs may write an f32 C.
	CType tensor.DType
	// Alpha and Beta scale the product and the old C. Alpha is usually 1; both 0 is
	// refused as a forgotten field.
	Alpha, Beta float32
}

// gemmKey is everything a cuBLASLt plan depends on: shapes, types and pointer
// alignments, but not the pointers or scalars themselves.
type gemmKey struct {
	transA, transB                bool
	m, n, k, lda, ldb, ldc, batch int
	strideA, strideB, strideC     int64
	typ, ctype                    tensor.DType
	alignA, alignB, alignC        uint32
}

// gemmPlan holds the descriptors and the algorithm chosen for one gemmKey.
type gemmPlan struct {
	desc, layA, layB, layC uintptr
	algo                   []byte // heuristic result; the algo is its first 64 bytes
}

// destroy frees the plan's descriptors.
func (p *gemmPlan) destroy() error {
	var first error
	for _, l := range []uintptr{p.layA, p.layB, p.layC} {
		if l != 0 {
			if err := lt(cublasLtMatrixLayoutDestroy, "", l); err != nil && first == nil {
				first = err
			}
		}
	}
	if p.desc != 0 {
		if err := lt(cublasLtMatmulDescDestroy, "", p.desc); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// blasType maps an lcc dtype to cudaDataType.
func blasType(t tensor.DType) (uintptr, bool) {
	switch t {
	case tensor.F32:
		return cudaR32F, true
	case tensor.BF16:
		return cudaR16BF, true
	case tensor.F16:
		return cudaR16F, true
	}
	return 0, false
}

// alignment is the largest power of two up to 256 dividing p.
func alignment(p DevicePtr) uint32 {
	a := uint32(256)
	for a > 1 && uint64(p)%uint64(a) != 0 {
		a /= 2
	}
	return a
}

// key validates p, fills its defaults and returns its plan key.
func (p *GemmParams) key() (gemmKey, error) {
	bad := func(format string, args ...any) (gemmKey, error) {
		return gemmKey{}, fmt.Errorf("cuda: Gemm %dx%dx%d: "+format,
			append([]any{p.M, p.N, p.K}, args...)...)
	}
	if p.M <= 0 || p.N <= 0 || p.K <= 0 {
		return bad("M, N and K must be positive")
	}
	if p.CType == tensor.Invalid {
		p.CType = p.Type
	}
	if _, ok := blasType(p.Type); !ok {
		return bad("element type %v: want f32, bf16 or f16", p.Type)
	}
	if _, ok := blasType(p.CType); !ok || (p.Type == tensor.F32 && p.CType != tensor.F32) {
		return bad("C type %v with inputs %v: want C of the input type, or f32", p.CType, p.Type)
	}
	if p.Alpha == 0 && p.Beta == 0 {
		return bad("Alpha and Beta are both 0 (set Alpha, usually to 1)")
	}
	colsA, colsB := p.K, p.N // row lengths as stored, row-major
	if p.TransA {
		colsA = p.M
	}
	if p.TransB {
		colsB = p.K
	}
	for _, ld := range []struct {
		name string
		v    *int
		min  int
	}{{"LDA", &p.LDA, colsA}, {"LDB", &p.LDB, colsB}, {"LDC", &p.LDC, p.N}} {
		if *ld.v == 0 {
			*ld.v = ld.min
		}
		if *ld.v < ld.min {
			return bad("%s = %d is less than the row length %d", ld.name, *ld.v, ld.min)
		}
	}
	if p.Batch == 0 {
		p.Batch = 1
	}
	if p.Batch < 0 || p.StrideA < 0 || p.StrideB < 0 || p.StrideC < 0 {
		return bad("negative batch or stride")
	}
	if p.Batch > 1 && p.StrideC < int64(p.M-1)*int64(p.LDC)+int64(p.N) {
		return bad("StrideC = %d would overlap outputs of a %dx%d C with LDC %d",
			p.StrideC, p.M, p.N, p.LDC)
	}
	if p.A == 0 || p.B == 0 || p.C == 0 {
		return bad("nil matrix pointer")
	}
	return gemmKey{p.TransA, p.TransB, p.M, p.N, p.K, p.LDA, p.LDB, p.LDC, p.Batch,
		p.StrideA, p.StrideB, p.StrideC, p.Type, p.CType,
		alignment(p.A), alignment(p.B), alignment(p.C)}, nil
}

// Gemm queues the GEMM described by p on stream s (nil for the default stream).
//
// cuBLASLt is column-major. A row-major M×N matrix with leading dimension ld is the
// same memory as a column-major N×M one, so row-major C = op(A)·op(B) is computed
// as column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap and keep their transposes.
func (b *BlasLt) Gemm(s *Stream, p GemmParams) error {
	key, err := p.key()
	if err != nil {
		return err
	}
	return b.dev.do(func() error {
		plan, err := b.plan(key)
		if err != nil {
			return err
		}
		alpha, beta := p.Alpha, p.Beta
		// Column-major call: first operand is B (N×K), second is A (K×M), D = C.
		return lt(cublasLtMatmul, fmt.Sprintf("%dx%dx%d batch %d", p.M, p.N, p.K, p.Batch),
			b.handle, plan.desc, uintptr(unsafe.Pointer(&alpha)),
			uintptr(p.B), plan.layB, uintptr(p.A), plan.layA,
			uintptr(unsafe.Pointer(&beta)), uintptr(p.C), plan.layC, uintptr(p.C), plan.layC,
			uintptr(unsafe.Pointer(&plan.algo[0])), uintptr(b.workspace), uintptr(b.wsSize),
			s.Handle())
	})
}

// plan returns the cached plan for key, building it on first use. The context must
// be current.
func (b *BlasLt) plan(key gemmKey) (*gemmPlan, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.plans[key]; ok {
		return p, nil
	}
	p, err := b.newPlan(key)
	if err != nil {
		if p != nil {
			p.destroy()
		}
		return nil, fmt.Errorf("cuda: Gemm %dx%dx%d (%v): %w", key.m, key.n, key.k, key.typ, err)
	}
	b.plans[key] = p
	return p, nil
}

// newPlan creates descriptors for key and asks cuBLASLt's heuristic for the best
// algorithm that fits the workspace and the pointers' alignment.
func (b *BlasLt) newPlan(k gemmKey) (*gemmPlan, error) {
	p := &gemmPlan{algo: make([]byte, 4*heuristicResultSize)}
	abType, _ := blasType(k.typ)
	cType, _ := blasType(k.ctype)
	if err := lt(cublasLtMatmulDescCreate, "", uintptr(unsafe.Pointer(&p.desc)), computeF32,
		cudaR32F); err != nil {
		return p, err
	}
	// Swapped operands (see Gemm): cuBLAS's A is our B and keeps TransB.
	transa, transb := int32(opN), int32(opN)
	if k.transB {
		transa = opT
	}
	if k.transA {
		transb = opT
	}
	if err := lt(cublasLtMatmulDescSetAttribute, "TRANSA", p.desc, descTransA,
		uintptr(unsafe.Pointer(&transa)), 4); err != nil {
		return p, err
	}
	if err := lt(cublasLtMatmulDescSetAttribute, "TRANSB", p.desc, descTransB,
		uintptr(unsafe.Pointer(&transb)), 4); err != nil {
		return p, err
	}
	// Column-major shapes of the stored matrices are the row-major ones flipped.
	colsB, rowsB := k.n, k.k // our B stored K×N row-major = N×K column-major
	if k.transB {
		colsB, rowsB = k.k, k.n
	}
	colsA, rowsA := k.k, k.m // our A stored M×K row-major = K×M column-major
	if k.transA {
		colsA, rowsA = k.m, k.k
	}
	layouts := []struct {
		dst        *uintptr
		typ        uintptr
		rows, cols int
		ld         int
		stride     int64
	}{
		{&p.layB, abType, colsB, rowsB, k.ldb, k.strideB},
		{&p.layA, abType, colsA, rowsA, k.lda, k.strideA},
		{&p.layC, cType, k.n, k.m, k.ldc, k.strideC},
	}
	for _, l := range layouts {
		if err := lt(cublasLtMatrixLayoutCreate, fmt.Sprintf("%dx%d ld %d", l.rows, l.cols, l.ld),
			uintptr(unsafe.Pointer(l.dst)), l.typ, uintptr(l.rows), uintptr(l.cols),
			uintptr(l.ld)); err != nil {
			return p, err
		}
		if k.batch == 1 {
			continue
		}
		count, stride := int32(k.batch), l.stride
		if err := lt(cublasLtMatrixLayoutSetAttribute, "BATCH_COUNT", *l.dst, layoutBatchCount,
			uintptr(unsafe.Pointer(&count)), 4); err != nil {
			return p, err
		}
		if err := lt(cublasLtMatrixLayoutSetAttribute, "STRIDED_BATCH_OFFSET", *l.dst,
			layoutBatchStride, uintptr(unsafe.Pointer(&stride)), 8); err != nil {
			return p, err
		}
	}

	var pref uintptr
	if err := lt(cublasLtMatmulPreferenceCreate, "", uintptr(unsafe.Pointer(&pref))); err != nil {
		return p, err
	}
	defer lt(cublasLtMatmulPreferenceDestroy, "", pref)
	ws := uint64(b.wsSize)
	if err := lt(cublasLtMatmulPreferenceSetAttr, "MAX_WORKSPACE_BYTES", pref, prefMaxWorkspace,
		uintptr(unsafe.Pointer(&ws)), 8); err != nil {
		return p, err
	}
	// cuBLAS's A, B, C, D are our B, A, C, C.
	for i, a := range []uint32{k.alignB, k.alignA, k.alignC, k.alignC} {
		al := a
		if err := lt(cublasLtMatmulPreferenceSetAttr, "MIN_ALIGNMENT", pref,
			uintptr(prefMinAlignA+i), uintptr(unsafe.Pointer(&al)), 4); err != nil {
			return p, err
		}
	}
	var found int32
	if err := lt(cublasLtMatmulAlgoGetHeuristic, "", b.handle, p.desc, p.layB, p.layA, p.layC,
		p.layC, pref, 1, uintptr(unsafe.Pointer(&p.algo[0])),
		uintptr(unsafe.Pointer(&found))); err != nil {
		return p, err
	}
	if found == 0 {
		return p, fmt.Errorf("cuBLASLt has no algorithm for this shape, type and alignment")
	}
	return p, nil
}
