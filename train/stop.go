package train

import (
	"fmt"
)

// agreeOnStep checks that every rank resumed from the same step.
func (t *trainer) agreeOnStep(step int) error {
	if t.shard == nil {
		return nil
	}
	all, err := t.cfg.Comm.AllGather("resume", []int64{1}, []float64{float64(step)})
	if err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	for r, s := range all {
		if int(s[0]) != step {
			return fmt.Errorf("--resume: rank %d resumed from step %d, rank %d from step %d "+
				"(do the ranks read the same --checkpoint-dir?)", t.rank, step, r, int(s[0]))
		}
	}
	return nil
}

// stopping says whether Config.Stop asks to end the run now; the ranks of a
// sharded run stop when any rank is asked to, all after the same step.
func (t *trainer) stopping() (bool, error) {
	if t.cfg.Stop == nil {
		return false, nil
	}
	asked := 0.0
	select {
	case <-t.cfg.Stop:
		asked = 1
	default:
	}
	if t.shard == nil {
		return asked == 1, nil
	}
	all, err := t.cfg.Comm.AllGather("stop", []int64{1}, []float64{asked})
	if err != nil {
		return false, err
	}
	for _, a := range all {
		if a[0] == 1 {
			return true, nil
		}
	}
	return false, nil
}
