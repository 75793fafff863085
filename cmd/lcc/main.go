// Command lcc compiles, checks, runs and trains transformer models for very long
// sequences. See the README for the commands; `lcc help CMD` for their flags.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/runtime/cuda"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// exitError carries an exit status other than 1 (lcc check's "numbers differ"
// is still 1, but a caller may want to tell them apart in the future).
type exitError struct {
	code int
	err  error
}

// Error is the wrapped error's message; the exit code travels beside it.
func (e *exitError) Error() string { return e.err.Error() }

// main runs the command line: every error is printed once, cut to maxMessage,
// and exits 1 (or the code an exitError carries: 130 or 143 after a signal).
func main() {
	// SilenceUsage: a usage dump after a run's error would bury the message
	// (usageOnArgError prints usage for wrong arguments only). SilenceErrors: main
	// prints each error itself, once and clipped.
	root := &cobra.Command{
		Use:           "lcc",
		Short:         "lcc compiles transformer training for very long sequences",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// On the root, so that every subcommand inherits both.
	root.SetFlagErrorFunc(suggestFlag)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return checkPositiveFlags(cmd) }
	root.AddCommand(compileCmd(), runCmd(), checkCmd(), trainCmd(), evalCmd(), exportCmd(), targetsCmd(), passesCmd(), benchCmd(), versionCmd())
	// After AddCommand: it wraps the Args of the commands that exist by then.
	usageOnArgError(root)
	if err := root.Execute(); err != nil {
		// Whatever command met it, a missing driver has one fix; say it instead of
		// the loader's message.
		if cuda.NoDriver(err) {
			err = errors.New("no NVIDIA driver (libcuda.so.1 not found); use --device=cpu")
		}
		fmt.Fprintf(os.Stderr, "lcc: %s\n", clipMessage(err.Error()))
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

// usageOnArgError makes a wrong argument count of every command below c print
// the command's usage line after cobra's message.
func usageOnArgError(c *cobra.Command) {
	for _, sub := range c.Commands() {
		usageOnArgError(sub)
	}
	// Wrapped, not replaced: the command's own argument rule still decides.
	check := c.Args
	if check == nil {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return fmt.Errorf("%s: %w\nusage: %s", cmd.CommandPath(), err, cmd.UseLine())
		}
		return nil
	}
}

// maxMessage bounds what lcc prints for one error. Messages cut the lists and names
// a file decides (tensor.Brief); this is the last guard, so that no input makes lcc
// print megabytes.
const maxMessage = 8 << 10

// clipMessage returns msg, or its first maxMessage bytes and how long it was.
func clipMessage(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	return fmt.Sprintf("%s... (%d bytes in all)", msg[:maxMessage], len(msg))
}

// versionCmd is `lcc version`: the version, commit and Go version, and the CUDA
// driver and NVRTC this machine has.
func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print lcc's version, commit and Go version, and the CUDA driver and NVRTC it finds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The driver and NVRTC are looked for, not required: version must work on a
			// host without a GPU, where it says what is missing.
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "lcc %s\n", version)
			fmt.Fprintf(w, "commit       %s\n", commit())
			fmt.Fprintf(w, "go           %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			fmt.Fprintf(w, "cuda driver  %s\n", driverFound())
			fmt.Fprintf(w, "nvrtc        %s\n", nvrtcFound())
			return nil
		},
	}
}

// commit is the VCS revision the binary was built from (go build stamps it in a
// git checkout), "+ changes" when the tree was modified, or "unknown".
func commit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, modified := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	// The revision alone would name a tree the binary was not built from.
	if modified {
		rev += " + changes"
	}
	return rev
}

// driverFound is the CUDA driver's version and path, or "none found".
func driverFound() string {
	path, v, err := cuda.DriverLibrary()
	if err != nil {
		if cuda.NoDriver(err) {
			return "none found (libcuda.so.1)"
		}
		return "none usable: " + err.Error()
	}
	return fmt.Sprintf("CUDA %d.%d (%s)", v/1000, v%1000/10, path)
}

// nvrtcFound is the default NVRTC's version and path, and the sm_90a one's when
// that is another (LCC_NVRTC12), or "none found".
func nvrtcFound() string {
	// sm_80 is the lowest arch lcc compiles for, so its NVRTC is the default one.
	n, err := cuda.NVRTCFor("sm_80")
	if err != nil {
		return "none found"
	}
	v, _ := n.Version()
	s := fmt.Sprintf("%s (%s)", v, n.Path())
	if h, err := cuda.NVRTCFor("sm_90a"); err == nil && h.Path() != n.Path() {
		hv, _ := h.Version()
		s += fmt.Sprintf("; for sm_90a %s (%s)", hv, h.Path())
	}
	return s
}
