package cuda

import "os"

// The environment switches this package reads. They are read only here, so a
// reader can see every knob in one file.
const (
	// EnvNVRTC names the NVRTC library to load instead of searching for one.
	EnvNVRTC = "LCC_NVRTC"
	// EnvNVRTC12 names a second NVRTC, 12.0 or newer, that NVRTCFor loads beside the
	// default one for architectures the default is too old for (sm_90a). CI sets it
	// to Debian trixie's NVRTC 12.4, since bookworm's 11.8 cannot compile sm_90a.
	EnvNVRTC12 = "LCC_NVRTC12"
	// EnvCUDALib names the CUDA driver library (libcuda.so.1) to load.
	EnvCUDALib = "LCC_CUDA_LIB"
	// EnvCublasLt names the cuBLASLt library to load.
	EnvCublasLt = "LCC_CUBLASLT"
	// EnvNCCL names the NCCL library to load.
	EnvNCCL = "LCC_NCCL"
	// EnvCacheDir overrides the kernel cache directory.
	EnvCacheDir = "LCC_CACHE_DIR"
	// envCUDAHome is the toolkit root that installers and build systems set.
	envCUDAHome = "CUDA_HOME"
)

// config is a snapshot of the environment switches.
type config struct {
	nvrtc, cudaLib, cublasLt, nccl string // library overrides, "" to search
	nvrtc12                        string // the second NVRTC, "" for none
	cacheDir                       string // kernel cache directory, "" for the default
	cudaHome                       string // extra toolkit root to search, "" for none
}

// readConfig reads the environment. It is called when a library is first opened and
// when a cache is opened, so tests can change the environment between uses.
func readConfig() config {
	return config{
		nvrtc:    os.Getenv(EnvNVRTC),
		nvrtc12:  os.Getenv(EnvNVRTC12),
		cudaLib:  os.Getenv(EnvCUDALib),
		cublasLt: os.Getenv(EnvCublasLt),
		nccl:     os.Getenv(EnvNCCL),
		cacheDir: os.Getenv(EnvCacheDir),
		cudaHome: os.Getenv(envCUDAHome),
	}
}
