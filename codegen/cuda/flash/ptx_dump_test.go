package flash

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/nvrtctest"
)

// TestPTXDump writes the PTX of every kernel of every variant, its entry name
// replaced by KERNEL, into $LCC_PTX_DIR (skipped when unset): run it before and
// after a change to the templates and diff the folders, to see which kernels a
// change touches and how, without a GPU.
func TestPTXDump(t *testing.T) {
	dir := os.Getenv("LCC_PTX_DIR")
	if dir == "" {
		t.Skip("LCC_PTX_DIR is not set")
	}
	n12 := nvrtctest.NVRTC12(t)
	type job struct {
		name string
		k    Kernel
	}
	var jobs []job
	for i, d := range variants() {
		for _, tier := range []int{1, 2} {
			d.Tier = tier
			if d.Defaults().Check() != nil {
				continue
			}
			for j, k := range kernels(t, d) {
				jobs = append(jobs, job{fmt.Sprintf("v%02d_t%d_k%d_%s", i, tier, j, k.Op), k})
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for _, jb := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var ptx []byte
			var log string
			var err error
			if jb.k.Arch != "" {
				ptx, log, err = n12.Compile(jb.k.Source(), "k.cu", jb.k.Arch, nil)
			} else {
				ptx, log, err = cuda.Compile(jb.k.Source(), "k.cu", "compute_80", nil)
			}
			if err != nil {
				t.Errorf("%s: %v %s", jb.name, err, log)
				return
			}
			s := strings.ReplaceAll(string(ptx), jb.k.Name(), "KERNEL")
			if err := os.WriteFile(filepath.Join(dir, jb.name+".ptx"), []byte(s), 0o644); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}
