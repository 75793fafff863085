package cuda

import "os"

// The environment switches this package reads. They are read only here, so a
// reader can see every knob in one file.
const (
	// EnvNVRTC names the NVRTC library to load instead of searching for one.
	EnvNVRTC = "LCC_NVRTC"
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
	cacheDir                       string // kernel cache directory, "" for the default
	cudaHome                       string // extra toolkit root to search, "" for none
}

// readConfig reads the environment. It is called when a library is first opened and
// when a cache is opened, so tests can change the environment between uses.
func readConfig() config {
	return config{
		nvrtc:    os.Getenv(EnvNVRTC),
		cudaLib:  os.Getenv(EnvCUDALib),
		cublasLt: os.Getenv(EnvCublasLt),
		nccl:     os.Getenv(EnvNCCL),
		cacheDir: os.Getenv(EnvCacheDir),
		cudaHome: os.Getenv(envCUDAHome),
	}
}
