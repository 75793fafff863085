package flash

import (
	"fmt"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
)

// probeSrc runs the tile library's mask and work helpers (common.cu.go) for a
// sequence of FA_T queries over FA_S keys and writes what they say: per query
// tile its key tiles (fa_keys), per key tile its query rows (fa_queries), and
// per (row, col), rows and columns a tile past the ends included, the two
// visibility tests (bit 0: FA_HIDDEN_AT, bit 1: fa_hidden with fa_start).
const probeSrc = `extern "C" __global__ void @KERNEL@(int* keys, long long* qs, unsigned char* hid,
    const long long* ds) {
  const long long kn = FA_S, qn = FA_T, i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long* dsr = FA_DSR(0);
  if (i < (qn + FA_BR - 1) / FA_BR) {
    int j0, nkt;
    fa_keys(i * FA_BR, kn, dsr, &j0, &nkt);
    keys[2 * i] = j0, keys[2 * i + 1] = nkt;
  }
  if (i < (kn + FA_BC - 1) / FA_BC) {
    long long f, e, m;
    fa_queries(i * FA_BC, kn, qn, dsr, &f, &e, &m);
    qs[3 * i] = f, qs[3 * i + 1] = e, qs[3 * i + 2] = m;
  }
  const long long w = kn + FA_BC;
  for (long long p = i; p < (qn + FA_BR) * w; p += (long long)gridDim.x * blockDim.x) {
    const long long row = p / w, col = p % w;
    unsigned char b = FA_HIDDEN_AT(dsr, row, qn, col, kn) ? 1 : 0;
    if (row < qn && fa_hidden(row, col, kn, FA_LEFT ? fa_start(dsr, row) : 0)) b |= 2;
    hid[p] = b;
  }
}
`

// probeKernel renders probeSrc for d (after Defaults), with d's forward tiles.
func probeKernel(d Desc) Kernel {
	return Kernel{Op: "attention.flash.probe", Body: render(view{Desc: d, Kind: "probe", BR: d.Br, BC: d.Bc, NT: 128},
		probeSrc)}
}

// TestGPUPrimitives checks the tile library's helpers on the GPU against their
// definitions (ir/docs.go, ir/window.go): the visibility tests agree with
// "causal, at or after the row's start, inside the keys"; a query tile's key
// tiles hold every key a row of it sees and start at its first row's start; a
// key tile's query rows hold every row that sees one of its keys, and the rows
// from qk0 are exactly those whose start lies past its first key.
func TestGPUPrimitives(t *testing.T) {
	dev := devicetest.Open(t)
	cache, err := cuda.OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const T = 300
	docs := []int64{0, 0, 0, 3, 3, 3, 3, 3, 8} // two short documents, then one to the end (from 8)
	for _, c := range []struct {
		causal, docs bool
		window       int64
	}{{true, false, 0}, {false, false, 0}, {true, true, 0}, {true, false, 37}, {true, false, 1}, {true, true, 70},
		{true, false, 400}} {
		d := Desc{B: 1, T: T, S: T, Hq: 1, Hkv: 1, D: 64, Causal: c.causal, Docs: c.docs, Window: c.window,
			Br: 64, Bc: 32}.Defaults()
		name := fmt.Sprintf("causal=%v/docs=%v/window=%d", c.causal, c.docs, c.window)
		t.Run(name, func(t *testing.T) {
			starts := make([]int64, T)
			for i := range starts {
				if c.docs {
					starts[i] = docs[min(i, len(docs)-1)]
				}
			}
			start := func(r int64) int64 { // the row's first visible key
				s := int64(0)
				if c.docs {
					s = starts[r]
				}
				return max(s, ir.WindowStart(r, c.window))
			}
			visible := func(r, j int64) bool { return j < T && (!c.causal || j <= r) && j >= start(r) }
			k := probeKernel(d)
			arch, err := dev.KernelArch("")
			if err != nil {
				t.Fatal(err)
			}
			img, err := cache.Get(k.Source(), k.Name()+".cu", arch, nil)
			if err != nil {
				t.Fatal(err)
			}
			m, err := dev.LoadModule(img)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Unload()
			fn, err := m.Function(k.Name())
			if err != nil {
				t.Fatal(err)
			}
			nq, nk, w := (T+d.Br-1)/d.Br, (T+d.Bc-1)/d.Bc, int64(T+d.Bc)
			buf := func(bytes int) cuda.DevicePtr {
				p, err := dev.Alloc(bytes)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { dev.Free(p) })
				if err := dev.Memset8(p, 0xff, bytes); err != nil { // poisoned
					t.Fatal(err)
				}
				return p
			}
			keys, qs, hid, ds := buf(8*nq), buf(24*nk), buf(int((T+int64(d.Br))*w)), buf(8*T)
			if err := cuda.CopyHtoD(dev, ds, starts); err != nil {
				t.Fatal(err)
			}
			if err := fn.Launch([3]uint32{64, 1, 1}, [3]uint32{128, 1, 1}, 0, nil, keys, qs, hid, ds); err != nil {
				t.Fatal(err)
			}
			kh, qh, hh := make([]int32, 2*nq), make([]int64, 3*nk), make([]uint8, (T+int64(d.Br))*w)
			for _, cp := range []error{cuda.CopyDtoH(dev, kh, keys), cuda.CopyDtoH(dev, qh, qs), cuda.CopyDtoH(dev, hh, hid)} {
				if cp != nil {
					t.Fatal(cp)
				}
			}
			for r := int64(0); r < T+int64(d.Br); r++ {
				for j := int64(0); j < w; j++ {
					vis := r < T && visible(r, j)
					if got := hh[r*w+j]; got&1 != b2u(!vis) || r < T && got>>1 != b2u(!vis) {
						t.Fatalf("row %d, key %d: hidden bits %02b, visible %v", r, j, got, vis)
					}
				}
			}
			for qt := range nq {
				j0, nkt := int64(kh[2*qt]), int64(kh[2*qt+1])
				q0 := int64(qt * d.Br)
				if want := start(q0) / int64(d.Bc); c.causal && (c.docs || c.window > 0) && j0 != want {
					t.Errorf("query tile %d: first key tile %d, want %d (its first row's start)", qt, j0, want)
				}
				for r := q0; r < min(q0+int64(d.Br), T); r++ {
					for j := range int64(T) {
						if visible(r, j) && (j < j0*int64(d.Bc) || j >= nkt*int64(d.Bc)) {
							t.Fatalf("query tile %d: key tiles [%d, %d) miss row %d's key %d", qt, j0, nkt, r, j)
						}
					}
				}
			}
			for kt := range nk {
				first, qend, qk0 := qh[3*kt], qh[3*kt+1], qh[3*kt+2]
				k0 := int64(kt * d.Bc)
				for r := range int64(T) {
					sees := false
					for j := k0; j < min(k0+int64(d.Bc), T); j++ {
						sees = sees || visible(r, j)
					}
					if sees && (r < first || r >= qend) {
						t.Fatalf("key tile %d: rows [%d, %d) miss row %d", kt, first, qend, r)
					}
					if r >= first && r < qend && (r >= qk0) != (start(r) > k0) {
						t.Fatalf("key tile %d: row %d (start %d) is %v qk0 = %d", kt, r, start(r), r >= qk0, qk0)
					}
				}
			}
		})
	}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// TestProbeCompiles compiles TestGPUPrimitives' probe with NVRTC, so that a
// machine without a GPU finds a broken probe before a GPU session does.
func TestProbeCompiles(t *testing.T) {
	if _, err := cuda.NVRTCVersion(); err != nil {
		t.Skipf("skipping: no NVRTC library: %v", err)
	}
	for _, d := range []Desc{{B: 1, T: 300, S: 300, Hq: 1, Hkv: 1, D: 64, Causal: true, Docs: true, Window: 9},
		{B: 1, T: 300, S: 300, Hq: 1, Hkv: 1, D: 64}} {
		d = d.Defaults()
		k := probeKernel(d)
		if _, log, err := cuda.Compile(k.Source(), k.Name()+".cu", "compute_80", nil); err != nil {
			t.Errorf("%+v: %v\n%s", d, err, log)
		}
	}
}
