package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// CUDA graphs (driver API, CUDA 11.4+): a stream's work is captured once into a
// graph, instantiated, and replayed with one launch. The entry points are
// optional: a driver without them makes BeginCapture an error wrapping
// ErrUnavailable, and the executor then runs uncaptured, saying why.
var (
	cuStreamBeginCapture        = libcuda.sym("cuStreamBeginCapture_v2")
	cuStreamEndCapture          = libcuda.sym("cuStreamEndCapture")
	cuGraphInstantiateWithFlags = libcuda.sym("cuGraphInstantiateWithFlags")
	cuGraphLaunch               = libcuda.sym("cuGraphLaunch")
	cuGraphExecDestroy          = libcuda.sym("cuGraphExecDestroy")
	cuGraphDestroy              = libcuda.sym("cuGraphDestroy")
	cuGraphGetNodes             = libcuda.sym("cuGraphGetNodes")
)

// graphSymbols are the entry points Graph needs, resolved before a capture
// starts so that a missing one never leaves a stream half captured.
var graphSymbols = []*symbol{cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiateWithFlags,
	cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy, cuGraphGetNodes}

// captureModeRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED. The global and thread
// modes forbid "unsafe" calls (a synchronous copy, an allocation) on other
// threads while a capture is open; Go moves goroutines between threads and a
// memory sampler may run beside the step, so lcc orders its own calls instead.
const captureModeRelaxed = 2

// Graph is an instantiated CUDA graph: the work captured from one stream,
// replayed by Launch on any stream of the device.
type Graph struct {
	dev   *Device
	graph uintptr // CUgraph
	exec  uintptr // CUgraphExec
	nodes int
}

// GraphsAvailable reports whether the driver has the CUDA graph entry points,
// with the error naming the first one missing.
func GraphsAvailable() error {
	for _, s := range graphSymbols {
		if _, err := s.resolve(); err != nil {
			return err
		}
	}
	return nil
}

// Capture records everything work queues on s into a graph instead of running
// it, and instantiates the graph. Work that fails while capturing, or that
// capture does not allow (a synchronisation, a host wait), ends the capture
// and is the error; the stream is then usable again, with nothing queued.
func (s *Stream) Capture(work func() error) (*Graph, error) {
	if s == nil {
		return nil, errors.New("cuda: capture on the legacy default stream is not allowed")
	}
	if err := GraphsAvailable(); err != nil {
		return nil, err
	}
	if err := s.dev.do(func() error { return cu(cuStreamBeginCapture, "", s.handle, captureModeRelaxed) }); err != nil {
		return nil, err
	}
	werr := work()
	g := &Graph{dev: s.dev}
	// End the capture whatever work did, so the stream leaves capture mode.
	eerr := s.dev.do(func() error {
		return cu(cuStreamEndCapture, "", s.handle, uintptr(unsafe.Pointer(&g.graph)))
	})
	if werr != nil || eerr != nil {
		g.Destroy()
		if werr != nil {
			return nil, werr
		}
		return nil, eerr
	}
	err := s.dev.do(func() error {
		var n uintptr
		if err := cu(cuGraphGetNodes, "", g.graph, 0, uintptr(unsafe.Pointer(&n))); err != nil {
			return err
		}
		g.nodes = int(n)
		return cu(cuGraphInstantiateWithFlags, "", uintptr(unsafe.Pointer(&g.exec)), g.graph, 0)
	})
	if err != nil {
		g.Destroy()
		return nil, err
	}
	return g, nil
}

// Nodes is the number of nodes (kernels, memsets, copies) captured.
func (g *Graph) Nodes() int { return g.nodes }

// Launch queues the whole graph on s.
func (g *Graph) Launch(s *Stream) error {
	if g == nil || g.exec == 0 {
		return errors.New("cuda: launch of a destroyed graph")
	}
	return g.dev.do(func() error { return cu(cuGraphLaunch, fmt.Sprintf("%d nodes", g.nodes), g.exec, s.Handle()) })
}

// Destroy releases the instantiated graph and the graph; safe on nil and
// more than once.
func (g *Graph) Destroy() error {
	if g == nil {
		return nil
	}
	var errs []error
	if g.exec != 0 {
		errs = append(errs, g.dev.do(func() error { return cu(cuGraphExecDestroy, "", g.exec) }))
		g.exec = 0
	}
	if g.graph != 0 {
		errs = append(errs, g.dev.do(func() error { return cu(cuGraphDestroy, "", g.graph) }))
		g.graph = 0
	}
	return errors.Join(errs...)
}
