package nccl

import (
	"fmt"

	"github.com/lcc-dev/lcc/runtime/comm/tcp"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// Join is the multi-process start of an NCCL run: the ranks meet through the
// rendezvous at cfg.Addr and connect their TCP mesh (runtime/comm/tcp), rank 0
// makes the NCCL unique id and the mesh carries it to every rank, and each rank
// joins the NCCL communicator on dev. The mesh stays open as the communicator's
// Monitor, so that a rank that dies is named (NCCL alone cannot say which); the
// caller closes it after the communicator. opts.Timeout defaults to
// cfg.Watchdog.
func Join(dev *cuda.Device, cfg tcp.Config, opts Options) (*Comm, *tcp.Comm, error) {
	mesh, err := tcp.Connect(cfg)
	if err != nil {
		return nil, nil, err
	}
	id, err := shareID(mesh, cuda.NCCLGetUniqueID)
	if err != nil {
		mesh.Abort(err)
		return nil, nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = cfg.Watchdog
	}
	opts.Monitor = mesh
	c, err := New(dev, mesh.Size(), mesh.Rank(), id, opts)
	if err != nil {
		mesh.Abort(err)
		return nil, nil, err
	}
	return c, mesh, nil
}

// idCommunicator is what shareID needs of the mesh.
type idCommunicator interface {
	Rank() int
	AllGather(op string, shape []int64, x []float64) ([][]float64, error)
}

// shareID has rank 0 make the id and every rank receive it: the 128 bytes travel
// as one float64 each through an all-gather (the other ranks send nothing).
func shareID(c idCommunicator, newID func() (cuda.NCCLUniqueID, error)) (cuda.NCCLUniqueID, error) {
	var id cuda.NCCLUniqueID
	var mine []float64
	if c.Rank() == 0 {
		var err error
		if id, err = newID(); err != nil {
			return id, fmt.Errorf("nccl: rank 0: %w", err)
		}
		mine = idFloats(id)
	}
	all, err := c.AllGather("nccl unique id", nil, mine)
	if err != nil {
		return id, err
	}
	if len(all[0]) != len(id) {
		return id, fmt.Errorf("nccl: rank %d: rank 0 sent a %d-byte NCCL id, want %d", c.Rank(),
			len(all[0]), len(id))
	}
	for i, v := range all[0] {
		id[i] = byte(v)
	}
	return id, nil
}

func idFloats(id cuda.NCCLUniqueID) []float64 {
	out := make([]float64, len(id))
	for i, b := range id {
		out[i] = float64(b)
	}
	return out
}
