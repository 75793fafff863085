package train

import (
	"errors"
	"fmt"
	"time"

	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/train/snapshot"
)

// saver takes the checkpoints of a resident run without stopping it. A
// checkpoint queues a copy of the optimizer's state into pinned host memory on
// the optimizer's copy stream (exec.Optimizer.Snapshot) and returns; the next
// step starts at once, and a goroutine waits for the copy and writes the files
// straight from the pinned bytes (checkpoint.SaveRaw of residentRaw: the files
// a synchronous download's tensors would give, written atomically as every
// checkpoint). The next checkpoint, and the run's end, wait for that write and
// return its error; the pinned buffer is not touched again before.
//
// The staging copy on the device, which lets the next update run without
// waiting for the host link, is taken only when the planned peak plus the
// staging fits the run's memory budget (the run's planned peak then counts
// it), and is freed as soon as its copy is done; the pinned buffer is
// allocated once and reused.
type saver struct {
	host  *cuda.HostBuffer
	stage bool
	snap  *exec.Snapshot // the copy of the outstanding write, until released
	out   chan written   // the outstanding write's result; nil: none
}

// written is the background writer's result: the checkpoint's step and
// path, the GPU time of the staging copy and of the copy to the host, and
// the time from the end of the copy to the files' commit.
type written struct {
	step              int
	path              string
	stage, copy, file time.Duration
	err               error
}

// newSaver allocates the pinned buffer of the resident run's checkpoints.
func (t *trainer) newSaver() (*saver, error) {
	opt := t.dev.opt
	host, err := t.cfg.Session.Device().AllocHost(opt.SnapshotBytes())
	if err != nil {
		return nil, fmt.Errorf("checkpoint buffer: %w", err)
	}
	// The plan decided whether the staging copy fits (cost.StepMemory.WithSnapshots).
	return &saver{host: host, stage: t.stageSnapshots}, nil
}

// startSave queues the checkpoint of step and starts its writer; the previous
// write must be finished (finishSave). line is the step's --metrics line.
func (t *trainer) startSave(step int, loss float64, line []byte) error {
	sv := t.dev.saver
	snap, err := t.dev.opt.Snapshot(sv.host, sv.stage)
	if err != nil {
		return err
	}
	sv.snap = snap
	m, done := t.meta(loss, line), t.dev.done
	sv.out = make(chan written, 1)
	go func() { sv.out <- t.writeSnapshot(snap, step, done, m) }()
	return nil
}

// writeSnapshot waits for snap's copy and writes it as the checkpoint of step.
func (t *trainer) writeSnapshot(snap *exec.Snapshot, step, done int, m snapshot.Meta) written {
	w := written{step: step}
	if w.err = snap.Wait(); w.err != nil {
		w.err = fmt.Errorf("checkpoint of step %d: copying the state: %w", step, w.err)
		return w
	}
	t0 := time.Now()
	if w.stage, w.copy, w.err = snap.Times(); w.err != nil {
		return w
	}
	master, mo, v := snap.Raw()
	if w.path, w.err = snapshot.SaveRaw(t.cfg.CheckpointDir, step, m, t.residentRaw(master, mo, v, done)); w.err == nil {
		w.err = snapshot.Prune(t.cfg.CheckpointDir, t.cfg.Keep)
	}
	w.file = time.Since(t0)
	return w
}

// pollSave releases the snapshot (its staging memory) once the copy is done,
// and collects the outstanding write once it is done, returning its error; it
// does not block. It says whether it did either.
func (t *trainer) pollSave(res *Result) (bool, error) {
	sv := t.dev.saver
	if sv == nil {
		return false, nil
	}
	did := false
	if sv.snap != nil {
		if err := sv.snap.Pump(); err != nil {
			return true, err
		}
		ok, err := sv.snap.Done()
		if err != nil || ok {
			err = errors.Join(err, sv.snap.Release())
			sv.snap, did = nil, true
		}
		if err != nil {
			return true, err
		}
	}
	select {
	case w := <-sv.out:
		sv.out = nil
		return true, t.saved(res, w)
	default:
		return did, nil
	}
}

// finishSave waits for the outstanding write, if any, appends its path to res
// and returns its error.
func (t *trainer) finishSave(res *Result) error {
	sv := t.dev.saver
	if sv == nil || sv.out == nil {
		return nil
	}
	if sv.snap != nil {
		if err := sv.snap.Flush(); err != nil {
			return err
		}
	}
	w := <-sv.out
	sv.out = nil
	return t.saved(res, w)
}

// saved records a finished write and releases its snapshot.
func (t *trainer) saved(res *Result, w written) error {
	sv := t.dev.saver
	if sv.snap != nil {
		w.err = errors.Join(w.err, sv.snap.Release())
		sv.snap = nil
	}
	if w.err != nil {
		return w.err
	}
	res.Checkpoints = append(res.Checkpoints, w.path)
	bytes := float64(t.dev.opt.SnapshotBytes())
	fmt.Fprintf(t.cfg.Progress, "checkpoint step %d: %s (state copied on the device in %.2f ms, to the "+
		"host in %.1f ms, %.1f GB/s; files written in %.2f s)\n", w.step, w.path, ms(w.stage), ms(w.copy),
		bytes/w.copy.Seconds()/1e9, w.file.Seconds())
	return nil
}

// closeSaver waits for an outstanding write (its error is dropped: the run is
// ending with another) and frees the pinned buffer.
func (t *trainer) closeSaver() {
	sv := t.dev.saver
	if sv == nil {
		return
	}
	if sv.snap != nil {
		sv.snap.Flush()
	}
	if sv.out != nil {
		<-sv.out
	}
	if sv.snap != nil {
		sv.snap.Release()
	}
	sv.host.Free()
	t.dev.saver = nil
}

// checkpointStats is what checkpoints cost the training loop after a step.
type checkpointStats struct {
	// wait is the time the loop spent on checkpoints: taking one (waiting for
	// the previous write and queueing the copies; on the host, all of it), and
	// releasing the staging copy of one whose copy is done. write is the part
	// spent waiting for the previous checkpoint's files.
	wait, write time.Duration
	// bytes crossed from device to host for it.
	bytes int64
}
