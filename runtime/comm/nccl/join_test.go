package nccl

import (
	"testing"

	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// TestShareID: rank 0's NCCL id reaches every rank byte for byte, and only rank 0
// makes one.
func TestShareID(t *testing.T) {
	var want cuda.NCCLUniqueID
	for i := range want {
		want[i] = byte(255 - i)
	}
	w := comm.NewWorld(3, 0)
	ids := make([]cuda.NCCLUniqueID, 3)
	err := w.Run(func(e *comm.Endpoint) error {
		var err error
		ids[e.Rank()], err = shareID(e, func() (cuda.NCCLUniqueID, error) {
			if e.Rank() != 0 {
				t.Errorf("rank %d made an id", e.Rank())
			}
			return want, nil
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, id := range ids {
		if id != want {
			t.Errorf("rank %d got another id", r)
		}
	}
}
