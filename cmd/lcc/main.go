// Command lcc compiles, checks, runs and trains transformer models for very long
// sequences. See the README for the commands; `lcc help CMD` for their flags.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// exitError carries an exit status other than 1 (lcc check's "numbers differ"
// is still 1, but a caller may want to tell them apart in the future).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	root := &cobra.Command{
		Use:           "lcc",
		Short:         "lcc compiles transformer training for very long sequences",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(suggestFlag)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return checkPositiveFlags(cmd) }
	root.AddCommand(compileCmd(), runCmd(), checkCmd(), trainCmd(), exportCmd(), targetsCmd(), passesCmd(), benchCmd(), versionCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "lcc: %s\n", clipMessage(err.Error()))
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
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

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print lcc's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "lcc %s\n", version)
			return nil
		},
	}
}
