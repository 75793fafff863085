# lcc's build, test and demo entry points. `make test` is what CI (.ci/run) runs.
# Everything builds with CGO_ENABLED=0; no target needs a GPU except gpu-tests' binaries.

GO          ?= go
PKGS        ?= ./...
# Short fuzz runs that `make test` appends; `make fuzz` runs the same list longer.
# Each entry is PACKAGE_DIR:FuzzFunc. Entries whose directory or function does not
# exist yet are skipped, so the list can name packages before they land.
FUZZ        ?= ./frontends/onnx:FuzzDecode ./frontends/onnx:FuzzImport ./safetensors:FuzzDecode ./ir:FuzzParse \
	./train/snapshot:FuzzLoad ./train/data:FuzzOpenTokens ./runtime/comm/rendezvous:FuzzDecodeHello
FUZZTIME    ?= 10s
LONGFUZZTIME ?= 5m
# Go minimizes each new interesting input before fuzzing on, which can take a short
# run's whole time (golang/go#51484); short runs bound it by a count, so that a 10 s
# run executes tens of thousands of inputs (the seeds are a few hundred bytes each).
FUZZMINTIME ?= 100x
LONGFUZZMINTIME ?= 10s
# Packages with GPU tests (func TestGPU...; cmd/lcc's TestMakefileListsGPUPackages keeps this
# list complete). gpu-tests builds each one's test binary into .gpu/, named after its
# path (runtime/comm/nccl -> .gpu/runtime_comm_nccl.test), lists them in .gpu/tests.txt
# ("NAME PACKAGE_DIR" per line, which scripts/gpu_check.sh reads), and builds .gpu/lcc.
GPU_PKGS    ?= ./runtime/cuda ./runtime/exec ./perf/flash ./codegen/cuda/flash ./runtime/comm/nccl ./runtime/comm/devlocal ./train ./train/runner ./train/eval

.PHONY: all build test unit-test fuzz-short fuzz gpu-tests demo vet fmt clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -o bin/lcc ./cmd/lcc

test: unit-test fuzz-short

unit-test:
	$(GO) test -count=1 -timeout 15m $(PKGS)

# run-fuzz TIME,MINTIME: runs each FUZZ entry for TIME, minimizing new inputs for
# MINTIME, skipping absent packages/functions.
define run-fuzz
	@set -e; for entry in $(FUZZ); do \
		dir=$${entry%%:*}; fn=$${entry##*:}; \
		if [ ! -d "$$dir" ]; then echo "fuzz: skip $$fn: no package $$dir yet"; continue; fi; \
		if ! grep -qs "^func $$fn(" "$$dir"/*_test.go; then \
			echo "fuzz: skip $$dir: no $$fn"; continue; fi; \
		echo "fuzz: $$dir $$fn for $(1)"; \
		log=$$(mktemp); \
		for try in 1 2 3; do \
			rc=0; \
			$(GO) test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(1) -fuzzminimizetime=$(2) "$$dir" >$$log 2>&1 || rc=$$?; \
			cat $$log; \
			[ $$rc -ne 0 ] || break; \
			if ! grep -q "context deadline exceeded" $$log || grep -q "Failing input written" $$log || [ $$try -eq 3 ]; then \
				rm -f $$log; exit $$rc; fi; \
			echo "fuzz: $$fn stopped at Go's fuzzing deadline with no failing input; running it again"; \
		done; rm -f $$log; \
	done
endef

fuzz-short:
	$(call run-fuzz,$(FUZZTIME),$(FUZZMINTIME))

fuzz:
	$(call run-fuzz,$(LONGFUZZTIME),$(LONGFUZZMINTIME))

# Test binaries and lcc for a GPU machine: copy the tree with .gpu/ there and run
# scripts/gpu_check.sh, which runs every binary .gpu/tests.txt lists in its package.
gpu-tests:
	@mkdir -p .gpu
	@set -e; : >.gpu/tests.txt; for pkg in $(GPU_PKGS); do \
		if ! ls "$$pkg"/*_test.go >/dev/null 2>&1; then \
			echo "gpu-tests: $$pkg: no such package or no tests" >&2; exit 1; fi; \
		name=$$(echo "$${pkg#./}" | tr / _); \
		echo "gpu-tests: $$pkg -> .gpu/$$name.test"; \
		CGO_ENABLED=0 $(GO) test -c -o ".gpu/$$name.test" "$$pkg"; \
		echo "$$name $${pkg#./}" >>.gpu/tests.txt; \
	done
	CGO_ENABLED=0 $(GO) build -o .gpu/lcc ./cmd/lcc

demo:
	$(GO) run ./cmd/lcc compile testdata/onnx/llama_mini.onnx --target=a100x8 \
		--seq-len=1048576 -o /tmp/lcc-demo --report=text

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -l -w .

clean:
	rm -rf bin .gpu
