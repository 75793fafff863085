package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/driver"
)

// applyRecorded gives a compiled step (DIR/graph.lcc) the flags it was compiled
// with: each flag not given takes the value DIR/report.json records, and one
// given with another value is refused, naming both. lcc train and lcc compile
// of DIR/graph.lcc then need no flag repeated.
func applyRecorded(cmd *cobra.Command, model string) error {
	rec, path, err := driver.RecordedFlags(model)
	if err != nil {
		return err
	}
	// Not a compiled step (an .onnx or a hand-written .lcc): nothing to apply.
	if rec == nil {
		return nil
	}
	flags := cmd.Flags()
	// A compiled step is one rank's program, already split; sharding it again would
	// split the sequence twice, so only the source model can be sharded.
	if f := flags.Lookup("ranks"); f != nil && f.Changed && f.Value.String() != "1" {
		return fmt.Errorf("--ranks=%s: %s is a compiled one-GPU step; to shard, give the model it came "+
			"from (%s names it)", f.Value.String(), model, path)
	}
	for _, r := range rec {
		f := flags.Lookup(r.Flag)
		// The record may name flags this command does not take (compile's --emit for train).
		if f == nil {
			continue
		}
		// Set, not just copied, so the flag's own parser validates the recorded text.
		if !f.Changed {
			if err := f.Value.Set(r.Value); err != nil {
				return fmt.Errorf("%s records --%s=%s: %w", path, r.Flag, r.Value, err)
			}
			continue
		}
		// A different value would compile a step the recorded plan was not made for.
		if given := flagText(f.Value.String()); given != r.Value {
			return fmt.Errorf("--%s=%s: %s is a compiled step, and %s records --%s=%s for it "+
				"(drop the flag, or compile the model again)", r.Flag, given, model, path, r.Flag,
				shownRecorded(r))
		}
	}
	return nil
}

// flagText is a flag's value as the record writes it: a list without brackets
// (pflag prints --segments as [2048,4096], report.json records 2048,4096).
func flagText(s string) string { return strings.Trim(s, "[]") }

// shownRecorded is a recorded value as a user reads it.
func shownRecorded(r driver.RecordedFlag) string {
	// report.json records a budget not given as 0, which would read as no memory at all.
	if r.Flag == "memory-budget" && r.Value == "0" {
		return "0 (none given: the target's memory)"
	}
	return r.Value
}
