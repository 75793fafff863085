package runner

import (
	"github.com/lcc-dev/lcc/collective"
	"github.com/lcc-dev/lcc/internal/gputest"
	"slices"
	"testing"
	"time"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/comm/nccl"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train"
)

// oneRankConfigs are the sharded steps a one-rank communicator is tested with:
// ring attention (send/recv), Ulysses (all-to-all), and dilated attention with a
// segment longer than the sequence, so that its rows are all-gathered even on one
// rank; every step all-reduces its gradients.
func oneRankConfigs() map[string]train.Config {
	ring, uly, dil := base(3), base(3), base(3)
	ring.Attention, ring.ShardMode = driver.AttentionOptions{Mode: "dense"}, "ring"
	uly.Attention, uly.ShardMode = driver.AttentionOptions{Mode: "dense"}, "ulysses"
	dil.Attention, dil.ShardMode = driver.AttentionOptions{Mode: "dilated", Segments: []int64{4, 32},
		Dilations: []int64{1, 2}}, "dilated"
	return map[string]train.Config{"ring": ring, "ulysses": uly, "dilated": dil}
}

// trainWith trains c as the one rank of communicator cm.
func trainWith(t *testing.T, c train.Config, cm collective.Communicator) []float64 {
	t.Helper()
	c.Comm = cm
	r, err := train.Train(c)
	if err != nil {
		t.Fatal(err)
	}
	return r.Losses
}

// TestOneRankComm: the step sharded for one rank, collectives included, trains
// as the unsharded step does (the CPU side of the NCCL test below).
func TestOneRankComm(t *testing.T) {
	for name, c := range oneRankConfigs() {
		got := trainWith(t, c, comm.NewWorld(1, time.Second).Endpoint(0))
		want, err := train.Train(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want.Losses {
			if d := relErr(got[i], want.Losses[i]); !(d <= 1e-5) {
				t.Errorf("%s: step %d: %v sharded for one rank, %v unsharded", name, i+1, got[i],
					want.Losses[i])
			}
		}
	}
}

// TestGPUNCCLOneRank trains through a one-rank NCCL communicator on GPU 0 (every
// collective of the step through NCCL's GPU path) and compares the losses with
// the in-process communicator's, bit for bit. It skips without a GPU or NCCL.
func TestGPUNCCLOneRank(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	defer dev.Close()
	id, err := cuda.NCCLGetUniqueID()
	if err != nil {
		gputest.Skipf(t, "skipping: no usable NCCL: %v", err)
	}
	nc, err := nccl.New(dev, 1, 0, id, nccl.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for name, c := range oneRankConfigs() {
		got := trainWith(t, c, nc)
		want := trainWith(t, c, comm.NewWorld(1, time.Second).Endpoint(0))
		t.Logf("%s: NCCL %v, in-process %v", name, got, want)
		if !slices.Equal(bitsOf(got), bitsOf(want)) {
			t.Errorf("%s: NCCL losses %v differ from the in-process communicator's %v", name, got, want)
		}
	}
}

// TestOneRankStepLowers: the step sharded for one rank (ring, Ulysses, dilated)
// lowers whole to the GPU, collectives included, in f32 and bf16: what the
// one-rank NCCL run executes.
func TestOneRankStepLowers(t *testing.T) {
	for name, c := range oneRankConfigs() {
		c.Comm = comm.NewWorld(1, 0).Endpoint(0)
		st, err := train.Step(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, storage := range []tensor.DType{tensor.F32, tensor.BF16} {
			p, err := codegen.Build(st.Func, codegen.Options{Arch: "sm_90", Storage: storage})
			if err != nil {
				t.Fatalf("%s, %v: %v", name, storage, err)
			}
			colls := 0
			for _, s := range p.Plan.Steps {
				if s.Kind == "collective" {
					colls++
				}
			}
			if colls == 0 {
				t.Errorf("%s, %v: no collective step", name, storage)
			}
		}
	}
}

// TestGPUProcessOneRank runs the launched GPU path with WORLD_SIZE=1: rendezvous,
// NCCL id over the TCP mesh, and the step sharded for one rank on the GPU
// executor with its collectives (the gradient all-reduce, the ring's send/recv,
// Ulysses' all-to-all) on a one-rank NCCL communicator. The losses match the CPU
// interpreter's within 1e-4 relative (fp32). It skips without a GPU or NCCL.
func TestGPUProcessOneRank(t *testing.T) {
	needGPUAndNCCL(t)
	for name, c := range oneRankConfigs() {
		env := Env{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: freePort(t)}
		got, err := ProcessGPU(c, env, 30*time.Second, tensor.F32)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := trainWith(t, c, comm.NewWorld(1, time.Second).Endpoint(0))
		t.Logf("%s: GPU %v, CPU %v", name, got.Losses, want)
		for i := range want {
			if d := relErr(got.Losses[i], want[i]); !(d <= 1e-4) {
				t.Errorf("%s: step %d: GPU loss %v, CPU %v (relative %.2g)", name, i+1, got.Losses[i], want[i], d)
			}
		}
	}
}

// TestGPULocalOneRank runs LocalGPU's goroutine-per-GPU path with one rank: the
// step sharded for one rank on GPU 0 with a one-rank NCCL communicator, against
// the CPU interpreter (1e-4 relative). It skips without a GPU or NCCL.
func TestGPULocalOneRank(t *testing.T) {
	needGPUAndNCCL(t)
	for name, c := range oneRankConfigs() {
		got, err := LocalGPU(c, 30*time.Second, tensor.F32)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := trainWith(t, c, comm.NewWorld(1, time.Second).Endpoint(0))
		for i := range want {
			if d := relErr(got.Losses[i], want[i]); !(d <= 1e-4) {
				t.Errorf("%s: step %d: GPU loss %v, CPU %v (relative %.2g)", name, i+1, got.Losses[i], want[i], d)
			}
		}
	}
}

// needGPUAndNCCL skips t (or fails it, under LCC_REQUIRE_GPU) without GPU 0 and
// a usable NCCL.
func needGPUAndNCCL(t *testing.T) {
	t.Helper()
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	dev.Close()
	if _, err := cuda.NCCLGetUniqueID(); err != nil {
		gputest.Skipf(t, "skipping: no usable NCCL: %v", err)
	}
}
