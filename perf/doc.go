// Package perf holds the workloads of `lcc bench`: each times one operation (or
// one training step) on the GPU with CUDA events and reports its figures beside
// the PyTorch anchors run in the same command (docs/design.md §9, "measure in the same
// command").
//
// The pieces every workload shares live here:
//   - Time runs a closure after warm-up and returns the median of CUDA-event
//     timings;
//   - RunAnchor runs one anchor script (python3 DIR/SCRIPT ARGS...) and parses the
//     JSON object it prints per line;
//   - Figure and Compare put lcc's figures and the anchors' side by side with their
//     ratio.
//
// Every benchmark of lcc lives under perf: the Go workloads here, the device-buffer
// runner of the flash kernels (perf/flash), and the shell and PyTorch scripts of
// the longer runs (perf/scripts); cmd/lcc's bench*.go only wire flags to them.
//
// perf sits at the level of train in the layering (docs/design.md §1): it may import
// driver, runtime and codegen, and only cmd imports it.
package perf
