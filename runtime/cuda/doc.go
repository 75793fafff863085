// Package cuda binds the CUDA driver API, NVRTC, cuBLASLt and NCCL by loading their
// shared libraries at run time with purego, and adds an NVRTC JIT with an on-disk
// kernel cache. It needs no cgo: lcc builds with CGO_ENABLED=0 and the same binary
// runs on machines with or without a GPU (docs/design.md §6).
//
// # Design
//
// Each library is opened on first use, trying an environment override (see env.go)
// or else a fixed list of sonames, plain and under the toolkit's lib64 directories.
// Each entry point is resolved on its first call and cached. A missing library, a
// missing symbol, an absent GPU or a failing call is an error value that names the
// library, the names tried and the loader's or the library's own message; nothing
// in this package panics on a missing piece or calls os.Exit. That is the main
// reason lcc does not use gorgonia.org/cu, which needs cgo, exits from init without
// a GPU and copies every kernel argument as eight bytes.
//
// A [Device] owns the device's primary context, the one the CUDA runtime, cuBLASLt
// and NCCL use, so all four libraries share allocations and streams. A CUDA context
// is current per OS thread while goroutines move between threads, so every method
// that needs the context locks the goroutine to its thread and makes the context
// current for the duration of the call.
//
// Kernel arguments are packed with their true C sizes (int32 and float32 as four
// bytes, pointers and 64-bit integers as eight, a [TensorMap] as 128 bytes on a
// 64-byte boundary); Go's int is refused because its size differs from C's int.
// Where the driver can report a kernel's parameter sizes (cuFuncGetParamInfo, CUDA
// 12.4+), a mismatch is an error before launch.
//
// # NVRTC
//
// One NVRTC is the default (LCC_NVRTC, else the newest found) and compiles
// everything the package-level Compile is given. An architecture that needs a newer
// NVRTC than the default (sm_90a needs 12.0) gets a second library from
// [NVRTCFor], which loads the one LCC_NVRTC12 names beside the default: CI checks
// tier-1 kernels with Debian bookworm's NVRTC 11.8 and sm_90a kernels with trixie's
// 12.4 in one test process. An NVRTC opened by path finds its libnvrtc-builtins in
// its own folder, without LD_LIBRARY_PATH.
//
// # Kernel cache
//
// [Cache] maps sha256(source, name, NVRTC version, arch, options) to a compiled
// image in a per-user directory. Invariants:
//   - the directory is owned by the current user and neither group- nor
//     world-writable, else [OpenCache] refuses it; new directories get mode 0700;
//   - an entry is written to a temporary file, fsynced and renamed into place, so a
//     reader sees a whole entry or none;
//   - every entry carries a header with its key, payload length and payload sha256;
//     an entry that fails any check is removed and rebuilt, and counted.
//
// GEMMs go through cuBLASLt with row-major semantics (see [GemmParams]); fp32 GEMMs
// use CUBLAS_COMPUTE_32F, which never rounds inputs to TF32.
package cuda
