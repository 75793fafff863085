package comm

import (
	"github.com/lcc-dev/lcc/collective"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// Device is a communicator on GPUs: the host-level collective.Communicator plus
// collectives queued on device buffers, on the communicator's own stream. The
// executor (runtime/exec) runs a sharded program's collectives through it.
// runtime/comm/nccl implements it with NCCL, one GPU per rank;
// runtime/comm/devlocal with device-to-device copies between ranks that share
// one GPU (a test and development mode).
//
// Ordering: After makes later collectives wait for an event recorded on a
// compute stream (once their inputs are written and their outputs no longer
// read); Done records an event after the collectives queued so far, which a
// compute stream waits on before it reads their results. Every rank queues the
// same collectives in the same order. Counts and offsets are elements of dt.
type Device interface {
	collective.Communicator
	After(e *cuda.Event) error
	Done() (*cuda.Event, error)
	// AllReduceDevice reduces count elements of send over the ranks into recv.
	AllReduceDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType, red cuda.ReduceOp) error
	// AllGatherDevice gathers count elements from every rank into recv, rank-major.
	AllGatherDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType) error
	// ReduceScatterDevice reduces size·count elements of send over the ranks
	// and leaves block rank (count elements) in recv.
	ReduceScatterDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType,
		red cuda.ReduceOp) error
	// SendRecvDevice sends sendCount elements of send to rank dst and receives
	// recvCount elements from rank src into recv.
	SendRecvDevice(op string, send cuda.DevicePtr, sendCount, dst int, recv cuda.DevicePtr, recvCount,
		src int, dt tensor.DType) error
	// AllToAllDevice sends sendCounts[d] elements at sendOff[d] of send to rank d
	// and receives recvCounts[s] elements from rank s at recvOff[s] of recv.
	AllToAllDevice(op string, send cuda.DevicePtr, sendCounts, sendOff []int, recv cuda.DevicePtr,
		recvCounts, recvOff []int, dt tensor.DType) error
}
