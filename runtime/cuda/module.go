package cuda

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is code loaded into a device's context: PTX, which the driver JIT-compiles
// for the device, or a cubin.
type Module struct {
	dev    *Device
	handle uintptr // CUmodule
}

// LoadModule loads a PTX or cubin image, as returned by Compile, CompileCUBIN or
// Cache.Get. PTX need not carry its terminating NUL; one is added.
func (d *Device) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuda: LoadModule: empty image")
	}
	if !bytes.HasPrefix(image, []byte("\x7fELF")) && image[len(image)-1] != 0 {
		image = append(image[:len(image):len(image)], 0)
	}
	m := &Module{dev: d}
	err := d.do(func() error {
		return cu(cuModuleLoadData, fmt.Sprint(len(image), "-byte image"),
			uintptr(unsafe.Pointer(&m.handle)), uintptr(unsafe.Pointer(&image[0])))
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Unload releases the module; its functions must not be launched afterwards.
func (m *Module) Unload() error {
	if m.handle == 0 {
		return nil
	}
	err := m.dev.do(func() error { return cu(cuModuleUnload, "", m.handle) })
	m.handle = 0
	return err
}

// Function is a kernel of a loaded module.
type Function struct {
	dev    *Device
	name   string
	handle uintptr // CUfunction
	// params holds the kernel's parameter sizes in bytes when the driver can report
	// them (cuFuncGetParamInfo), else nil and arguments are not checked.
	params []int
}

// Function looks up a kernel by its (extern "C", so unmangled) name.
func (m *Module) Function(name string) (*Function, error) {
	f := &Function{dev: m.dev, name: name}
	cname := cString(name)
	err := m.dev.do(func() error {
		if err := cu(cuModuleGetFunction, name, uintptr(unsafe.Pointer(&f.handle)), m.handle,
			uintptr(unsafe.Pointer(&cname[0]))); err != nil {
			return err
		}
		f.params = paramSizes(f.handle)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// paramSizes asks the driver for the size of each kernel parameter. It returns nil
// when the driver cannot say (cuFuncGetParamCount and cuFuncGetParamInfo need
// CUDA 12.4+), and launches then go unchecked. It asks for the count first, so it
// never probes past the last parameter: such a probe is an API error that
// compute-sanitizer reports.
func paramSizes(fn uintptr) []int {
	if _, err := cuFuncGetParamInfo.resolve(); err != nil {
		return nil
	}
	if _, err := cuFuncGetParamCount.resolve(); err != nil {
		return nil
	}
	var count uint64
	r, err := cuFuncGetParamCount.call(fn, uintptr(unsafe.Pointer(&count)))
	if err != nil || int32(r) != cudaSuccess || count == 0 || count > 4096 {
		return nil
	}
	sizes := make([]int, 0, count)
	for i := uint64(0); i < count; i++ {
		var off, size uint64
		r, err := cuFuncGetParamInfo.call(fn, uintptr(i),
			uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)))
		if err != nil || int32(r) != cudaSuccess {
			return nil
		}
		sizes = append(sizes, int(size))
	}
	return sizes
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// funcAttrMaxDynamicShared is CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
const funcAttrMaxDynamicShared = 8

// SetMaxDynamicSharedMem allows launches with more than 48 KiB of dynamic shared
// memory, up to the device's opt-in limit.
func (f *Function) SetMaxDynamicSharedMem(bytes int) error {
	return f.dev.do(func() error {
		return cu(cuFuncSetAttribute, fmt.Sprintf("%s, max dynamic shared %d", f.name, bytes),
			f.handle, funcAttrMaxDynamicShared, uintptr(bytes))
	})
}

// Launch queues the kernel on stream (nil for the default stream) with the given
// grid and block dimensions and dynamic shared memory. Each argument is passed with
// its C size:
//
//	int8, uint8, bool          1 byte
//	int16, uint16              2 bytes (also bf16/f16 bits)
//	int32, uint32, float32     4 bytes
//	int64, uint64, float64     8 bytes
//	DevicePtr, uintptr         8 bytes
//	TensorMap                  128 bytes, 64-byte aligned (a const __grid_constant__
//	                           CUtensorMap parameter; see Device.EncodeTiled)
//
// Go's int and uint are refused: C's int is 4 bytes, so say int32 or int64. When the
// driver reports the kernel's parameter sizes, the count and each size are checked.
func (f *Function) Launch(grid, block [3]uint32, sharedMem uint32, stream *Stream,
	args ...any) error {
	buf, err := packArgs(args)
	if err != nil {
		return fmt.Errorf("cuda: launch %s: %w", f.name, err)
	}
	if err := f.checkArgs(args); err != nil {
		return err
	}
	for i, g := range grid {
		if g == 0 || block[i] == 0 {
			return fmt.Errorf("cuda: launch %s: grid %v, block %v: every dimension must be >= 1",
				f.name, grid, block)
		}
	}
	var params unsafe.Pointer // NULL for a kernel without parameters
	if len(args) > 0 {
		params = unsafe.Pointer(&buf[0])
	}
	// The message is formatted only on failure: Launch is on the executor's hot path.
	err = f.dev.do(func() error {
		r, err := cuLaunchKernel.call(f.handle, uintptr(grid[0]), uintptr(grid[1]),
			uintptr(grid[2]), uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
			uintptr(sharedMem), stream.Handle(), uintptr(params), 0)
		if err == nil && int32(r) != cudaSuccess {
			err = driverError(cuLaunchKernel.name, fmt.Sprintf("%s, grid %v, block %v, shared %d",
				f.name, grid, block, sharedMem), int32(r))
		}
		return err
	})
	runtime.KeepAlive(buf)
	return err
}

// checkArgs compares argument sizes with the driver's view of the kernel.
func (f *Function) checkArgs(args []any) error {
	if f.params == nil {
		return nil
	}
	if len(args) != len(f.params) {
		return fmt.Errorf("cuda: launch %s: %d arguments, the kernel takes %d", f.name,
			len(args), len(f.params))
	}
	for i, a := range args {
		if n, _ := argSize(a); n != f.params[i] {
			return fmt.Errorf("cuda: launch %s: argument %d is %T (%d bytes), the kernel's "+
				"parameter is %d bytes", f.name, i, a, n, f.params[i])
		}
	}
	return nil
}

// argSize returns the C size of a kernel argument and, for one of at most 8 bytes,
// its bits, little-endian. It returns 0 for a type that is not a kernel argument.
func argSize(a any) (int, uint64) {
	switch v := a.(type) {
	case int8:
		return 1, uint64(uint8(v))
	case uint8:
		return 1, uint64(v)
	case bool:
		if v {
			return 1, 1
		}
		return 1, 0
	case int16:
		return 2, uint64(uint16(v))
	case uint16:
		return 2, uint64(v)
	case int32:
		return 4, uint64(uint32(v))
	case uint32:
		return 4, uint64(v)
	case float32:
		return 4, uint64(math.Float32bits(v))
	case int64:
		return 8, uint64(v)
	case uint64:
		return 8, v
	case float64:
		return 8, math.Float64bits(v)
	case DevicePtr:
		return 8, uint64(v)
	case uintptr:
		return 8, uint64(v)
	case TensorMap:
		return TensorMapSize, 0
	}
	return 0, 0
}

// packArgs lays the arguments out for cuLaunchKernel's kernelParams: one Go
// allocation holding the array of pointers followed by the values, each in its own
// slot of whole 8-byte words, written with its own size at the start of the slot.
// The driver reads from each pointer exactly the size of the kernel's parameter, so
// a value is never widened or read past. A TensorMap's slot starts on a 64-byte
// boundary, the alignment of CUtensorMap. Keeping pointers and values in one
// []uint64 means the pointers point into the same allocation, which the GC never
// moves.
func packArgs(args []any) ([]uint64, error) {
	n := len(args)
	words := n
	for i, a := range args {
		size, _ := argSize(a)
		if size == 0 {
			hint := ""
			switch a.(type) {
			case int, uint:
				hint = " (Go's int is 8 bytes, C's int 4: use int32 or int64)"
			case *TensorMap:
				hint = " (pass the TensorMap by value)"
			}
			return nil, fmt.Errorf("argument %d: unsupported type %T%s", i, a, hint)
		}
		words += (size + 7) / 8
		if size == TensorMapSize {
			words += tensorMapAlign/8 - 1 // room to align the slot
		}
	}
	buf := make([]uint64, words)
	next := n // the next free word
	for i, a := range args {
		size, bits := argSize(a)
		if m, ok := a.(TensorMap); ok {
			for uintptr(unsafe.Pointer(&buf[next]))%tensorMapAlign != 0 {
				next++
			}
			*(*TensorMap)(unsafe.Pointer(&buf[next])) = m
		}
		slot := unsafe.Pointer(&buf[next])
		switch size {
		case 1:
			*(*uint8)(slot) = uint8(bits)
		case 2:
			*(*uint16)(slot) = uint16(bits)
		case 4:
			*(*uint32)(slot) = uint32(bits)
		case 8:
			*(*uint64)(slot) = bits
		}
		buf[i] = uint64(uintptr(slot))
		next += (size + 7) / 8
	}
	return buf, nil
}
