#!/usr/bin/env bash
# Builds the GPU test binaries and lcc and packs them for the device: .gpu/a/tests.tar.xz
# (the test binaries and tests.txt) and .gpu/b/lcc.tar.xz with a copy of the PyTorch
# anchors in .gpu/b/anchors (from ../shared/bench, which does not travel). It wipes
# .gpu/a and .gpu/b: write a call's script into .gpu/b after packing, then
# `run` with carry [".gpu/a", ".gpu/b"] and the command `bash .gpu/b/SCRIPT`.
# The carry must stay under 64 MiB with the tracked tree (about 42 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu/a .gpu/b .gpu/*.test .gpu/lcc .gpu/tests.txt
GOFLAGS="-ldflags=-s -w" make gpu-tests >/tmp/pack.log 2>&1
mkdir -p .gpu/a .gpu/b
tar -C .gpu -cf - $(cd .gpu && ls *.test) tests.txt | xz -9e -T2 > .gpu/a/tests.tar.xz
tar -C .gpu -cJf .gpu/b/lcc.tar.xz lcc
cp -r ../shared/bench .gpu/b/anchors
rm -f .gpu/*.test .gpu/lcc
du -sh .gpu/a .gpu/b
