// Package train is lcc's training runtime (docs/design.md §7): it compiles a model
// into a training step with driver's pipeline (the program lcc compile reports
// for the same flags, with the same program hash), adds the AdamW update, runs
// them on the CPU interpreter or the GPU executor, reports progress and metrics,
// and writes checkpoints that resume bit for bit.
//
// One step of Train, with A micro-batches (--accumulate):
//
//	for each micro-batch: loss, grads = grad(weights, batch)      (interp.Run)
//	                      sums = sums + grads                       (optim.Accumulate)
//	weights, state = adamw(state, sums, lr = schedule(step))        (optim.AdamW)
//
// The gradient function is driver.CompileStep's program (Step); the update
// from package optim; batches from package data; checkpoints from package
// checkpoint. On the CPU each piece is an ir.Func the interpreter runs. On the GPU
// (Config.Session) the step runs as the program driver compiled for the target
// (Config.Adopt), and the weights, fp32 masters and AdamW moments stay in device
// memory, updated by the executor's fused optimizer kernels (exec.Optimizer), not
// by these functions; the CPU path is their reference, and the GPU tests hold the
// losses to it.
//
// Invariants:
//   - A run is a pure function of the model, the data spec, the flags and the
//     seed: the interpreter is deterministic, the data stream is seeded, and the
//     learning rate is a function of the step alone.
//   - A checkpoint holds everything that function reads at a step boundary
//     (weights, optimizer state including the step count, the data position and
//     RNG), so a run resumed from step k continues with bit-identical losses to a
//     straight run, provided the flags are the same; --steps is part of the
//     schedule (the cosine spans it), so split a run with --stop-at, not by
//     changing --steps (a resume that changes the schedule says so).
//   - A checkpoint of other parameters (ParamsHash: names, dtypes and shapes of the
//     weights and optimizer state) or a damaged one is never loaded; one of the same
//     parameters resumes into whatever program the flags compile (a new --seq-len:
//     progressive length; SeqLenSchedule runs such stages as one run);
//     --resume falls back to the newest valid checkpoint and says which it skipped.
//     The activation-checkpoint policy is not part of the model: a resume may
//     change it (and --memory-budget, --target), with the same losses.
package train
