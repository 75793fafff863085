package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/lcc-dev/lcc/tensor"
)

// libnccl is NCCL, the collective library, version 2.
var libnccl = newLibrary("libnccl", EnvNCCL, func(c config) string { return c.nccl },
	"libnccl.so.2", "libnccl.so")

// NCCL entry points. ncclCommInitRank takes its 128-byte id by value, which
// purego.RegisterFunc lays out per platform ABI; the rest go through symbol.call.
var (
	ncclGetErrorString = libnccl.sym("ncclGetErrorString")
	ncclGetUniqueId    = libnccl.sym("ncclGetUniqueId")
	ncclCommInitRank   = libnccl.sym("ncclCommInitRank")
	ncclCommDestroy    = libnccl.sym("ncclCommDestroy")
	ncclAllReduce      = libnccl.sym("ncclAllReduce")
	ncclAllGather      = libnccl.sym("ncclAllGather")
	ncclReduceScatter  = libnccl.sym("ncclReduceScatter")
	ncclSend           = libnccl.sym("ncclSend")
	ncclRecv           = libnccl.sym("ncclRecv")
	ncclGroupStart     = libnccl.sym("ncclGroupStart")
	ncclGroupEnd       = libnccl.sym("ncclGroupEnd")
	ncclCommAbort      = libnccl.sym("ncclCommAbort")
	ncclCommAsyncError = libnccl.sym("ncclCommGetAsyncError")
	ncclSymbols        = []*symbol{ncclGetErrorString, ncclGetUniqueId, ncclCommInitRank,
		ncclCommDestroy, ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclSend, ncclRecv,
		ncclGroupStart, ncclGroupEnd, ncclCommAbort, ncclCommAsyncError}
)

// NCCLUniqueID is the rendezvous token (ncclUniqueId): rank 0 makes it with
// NCCLGetUniqueID and every rank passes the same bytes to NewComm.
type NCCLUniqueID [128]byte

// ncclUniqueIDArg is the C struct { char internal[128]; } for passing by value.
type ncclUniqueIDArg struct{ Internal [128]byte }

var (
	commInitOnce sync.Once
	commInitFn   func(comm *uintptr, nranks int32, id ncclUniqueIDArg, rank int32) int32
	commInitErr  error
)

// ReduceOp is a reduction for AllReduce and ReduceScatter (ncclRedOp_t).
type ReduceOp int

// The NCCL reductions.
const (
	Sum  ReduceOp = 0
	Prod ReduceOp = 1
	Max  ReduceOp = 2
	Min  ReduceOp = 3
	Avg  ReduceOp = 4 // NCCL 2.10+
)

// ncclType maps an lcc dtype to ncclDataType_t.
func ncclType(t tensor.DType) (uintptr, error) {
	switch t {
	case tensor.I8:
		return 0, nil
	case tensor.U8, tensor.Bool:
		return 1, nil
	case tensor.I32:
		return 2, nil
	case tensor.I64:
		return 4, nil
	case tensor.F16:
		return 6, nil
	case tensor.F32:
		return 7, nil
	case tensor.F64:
		return 8, nil
	case tensor.BF16:
		return 9, nil // NCCL 2.10+
	}
	return 0, fmt.Errorf("cuda: NCCL has no element type %v", t)
}

// ncclCheck turns an ncclResult_t into an error.
func ncclCheck(fn, what string, code int32) error {
	if code == 0 {
		return nil
	}
	msg := "unknown error"
	if p, err := ncclGetErrorString.call(uintptr(code)); err == nil && p != 0 {
		msg = goString(p)
	}
	return &Error{Lib: "libnccl", Func: fn, What: what, Code: int(code), Msg: msg}
}

// nccl calls an NCCL entry point and checks its ncclResult_t.
//
//go:uintptrescapes
func nccl(s *symbol, what string, args ...uintptr) error {
	r, err := s.call(args...)
	if err != nil {
		return err
	}
	return ncclCheck(s.name, what, int32(r))
}

// NCCLGetUniqueID makes a new rendezvous token; call it on one rank and send the
// bytes to the others (lcc's launcher does that over TCP).
func NCCLGetUniqueID() (NCCLUniqueID, error) {
	var id NCCLUniqueID
	err := nccl(ncclGetUniqueId, "", uintptr(unsafe.Pointer(&id)))
	return id, err
}

// NCCLGroupStart begins a group of NCCL calls (e.g. the Send and Recv of one ring
// step) that NCCL issues together at NCCLGroupEnd.
func NCCLGroupStart() error { return nccl(ncclGroupStart, "") }

// NCCLGroupEnd issues the calls since NCCLGroupStart.
func NCCLGroupEnd() error { return nccl(ncclGroupEnd, "") }

// Comm is one rank of an NCCL communicator on a device.
type Comm struct {
	dev          *Device
	handle       uintptr // ncclComm_t
	rank, nranks int
	// aborted is set by Abort, from any goroutine; the handle is then dead.
	aborted atomic.Bool
}

// errAborted is returned by calls on an aborted communicator.
var errAborted = errors.New("cuda: NCCL communicator aborted (ncclCommAbort)")

// NewComm joins rank of an nranks-wide communicator identified by id, on d. It
// blocks until all ranks have joined; in one process, call it from one goroutine
// per device (or inside NCCLGroupStart/End).
func (d *Device) NewComm(nranks, rank int, id NCCLUniqueID) (*Comm, error) {
	if rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("cuda: NCCL rank %d out of range for %d ranks", rank, nranks)
	}
	commInitOnce.Do(func() {
		addr, err := ncclCommInitRank.resolve()
		if err != nil {
			commInitErr = err
			return
		}
		purego.RegisterFunc(&commInitFn, addr)
	})
	if commInitErr != nil {
		return nil, commInitErr
	}
	c := &Comm{dev: d, rank: rank, nranks: nranks}
	err := d.do(func() error {
		code := commInitFn(&c.handle, int32(nranks), ncclUniqueIDArg{id}, int32(rank))
		return ncclCheck(ncclCommInitRank.name, fmt.Sprintf("rank %d of %d", rank, nranks), code)
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Rank returns this member's rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.nranks }

// collective queues one NCCL call on s with the device's context current.
func (c *Comm) collective(t tensor.DType, call func(dt uintptr) error) error {
	if c.aborted.Load() {
		return errAborted
	}
	dt, err := ncclType(t)
	if err != nil {
		return err
	}
	return c.dev.do(func() error { return call(dt) })
}

// AllReduce reduces count elements of send across ranks into recv on every rank.
func (c *Comm) AllReduce(send, recv DevicePtr, count int, t tensor.DType, op ReduceOp,
	s *Stream) error {
	return c.collective(t, func(dt uintptr) error {
		return nccl(ncclAllReduce, fmt.Sprint(count, " elements"), uintptr(send), uintptr(recv),
			uintptr(count), dt, uintptr(op), c.handle, s.Handle())
	})
}

// AllGather gathers sendCount elements from each rank into recv, rank-major
// (recv holds nranks·sendCount elements).
func (c *Comm) AllGather(send, recv DevicePtr, sendCount int, t tensor.DType, s *Stream) error {
	return c.collective(t, func(dt uintptr) error {
		return nccl(ncclAllGather, fmt.Sprint(sendCount, " elements"), uintptr(send), uintptr(recv),
			uintptr(sendCount), dt, c.handle, s.Handle())
	})
}

// ReduceScatter reduces nranks·recvCount elements of send across ranks and leaves
// block rank of the result (recvCount elements) in recv.
func (c *Comm) ReduceScatter(send, recv DevicePtr, recvCount int, t tensor.DType,
	op ReduceOp, s *Stream) error {
	return c.collective(t, func(dt uintptr) error {
		return nccl(ncclReduceScatter, fmt.Sprint(recvCount, " elements"), uintptr(send),
			uintptr(recv), uintptr(recvCount), dt, uintptr(op), c.handle, s.Handle())
	})
}

// Send sends count elements to rank peer, which must post a matching Recv.
func (c *Comm) Send(buf DevicePtr, count int, t tensor.DType, peer int, s *Stream) error {
	return c.collective(t, func(dt uintptr) error {
		return nccl(ncclSend, fmt.Sprintf("%d elements to rank %d", count, peer), uintptr(buf),
			uintptr(count), dt, uintptr(peer), c.handle, s.Handle())
	})
}

// Recv receives count elements from rank peer.
func (c *Comm) Recv(buf DevicePtr, count int, t tensor.DType, peer int, s *Stream) error {
	return c.collective(t, func(dt uintptr) error {
		return nccl(ncclRecv, fmt.Sprintf("%d elements from rank %d", count, peer), uintptr(buf),
			uintptr(count), dt, uintptr(peer), c.handle, s.Handle())
	})
}

// AsyncError returns the communicator's asynchronous error
// (ncclCommGetAsyncError): a failure of queued NCCL work, such as a peer's
// connection breaking, that no call has returned. nil while all is well.
func (c *Comm) AsyncError() error {
	if c.aborted.Load() {
		return errAborted
	}
	if c.handle == 0 {
		return nil
	}
	var res int32
	if err := nccl(ncclCommAsyncError, "", c.handle, uintptr(unsafe.Pointer(&res))); err != nil {
		return err
	}
	return ncclCheck("ncclCommGetAsyncError", fmt.Sprintf("rank %d of %d", c.rank, c.nranks), res)
}

// Abort frees the communicator and makes its queued and blocked operations end
// (ncclCommAbort): the way out of a collective a dead or hung peer never joins.
// It may be called from any goroutine while another waits in an NCCL call; the
// communicator is unusable afterwards.
func (c *Comm) Abort() error {
	if c.handle == 0 || c.aborted.Swap(true) {
		return nil
	}
	return c.dev.do(func() error { return nccl(ncclCommAbort, "", c.handle) })
}

// Close destroys the communicator.
func (c *Comm) Close() error {
	if c.handle == 0 || c.aborted.Load() {
		return nil
	}
	err := c.dev.do(func() error { return nccl(ncclCommDestroy, "", c.handle) })
	c.handle = 0
	return err
}
