#!/usr/bin/env bash
# Side-by-side: lcc train --device=cuda vs the PyTorch anchor, same GPU, same command.
# Needs .gpu/lcc (CGO_ENABLED=0 go build -o .gpu/lcc ./cmd/lcc) and PyTorch with CUDA.
set -euo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
.gpu/lcc train testdata/onnx/gpt_mini.onnx --device=cuda --data=synthetic:copy --seq-len 64 --batch 8 \
	--steps 300 --lr 3e-3 --seed 1 --progress-every 100 | tail -1
python3 perf/scripts/train_gpt_mini_torch.py
