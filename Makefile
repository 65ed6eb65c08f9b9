# The quick-start commands (README.md): `make train`, `make test`, and
# `make check` (the tests, then the sanitizer and fuzz builds: what CI runs).
# Both install missing Debian packages (when run as root), configure and
# build with CMake, then train or run the whole test suite (ctest).
BUILD ?= build
JOBS  ?= $(shell nproc)
NP    ?= 2
SPATIAL ?= 2x1x1
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

.PHONY: deps build train test sanitize fuzz check bench science clean

deps:
	@bash tools/install_deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

# Default training: cosmoflow on synthetic 32^3 universes, 2 ranks, each
# sample split in two along D (about 4 minutes on 2 cores; docs/results.md).
train: build
	mpirun -np $(NP) --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 $(BUILD)/bin/hybrid3d train \
	  --model cosmoflow --input-size 32 --spatial $(SPATIAL) --batch-size 8 --train-samples 1024 --val-samples 128 \
	  --epochs 6 --optimizer adam --lr 0.001 --lr-schedule poly --warmup-steps 32 --dropout 0.2 --val-every 128 \
	  --log-every 32 --metrics $(BUILD)/train_metrics.jsonl \
	  --save $(BUILD)/cosmoflow32.safetensors

test: build
	cd $(BUILD) && ctest --output-on-failure

# The checking builds (docs/testing.md): AddressSanitizer + UBSan (gcc) on
# the unit and 2-rank MPI tests and the bad-input, checkpoint and full-disk
# scripts; and each libFuzzer target (clang) for FUZZ_SECONDS from the seed
# corpus in fuzz/corpus.
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30

sanitize: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHYBRID3D_SANITIZE=address,undefined
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target unit_tests mpi_equivalence hybrid3d_cli
	cd $(ASAN_BUILD) && ctest --output-on-failure -R '^(unit|mpi_np2|bad_inputs|checkpoint|disk_full)$$'

fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -DHYBRID3D_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DFUZZ_SECONDS=$(FUZZ_SECONDS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets
	cd $(FUZZ_BUILD) && ctest --output-on-failure

# Everything CI runs.
check: test sanitize fuzz

# The 512^3 headline first (about 2 min), so that the report's section 6
# measures the same code as the rest; a failed headline is reported there
# rather than stopping the rest.
bench: build
	-bench/headline_512.sh $(BUILD)/bin/hybrid3d
	/usr/bin/python3 bench/performance.py --build $(BUILD)

# The science experiment (docs/science.md): whole 128^3 universes against
# 64^3 and 32^3 sub-volumes, with a power-spectrum baseline and a PyTorch
# parity check; about 1 h 45 min on 2 cores. Steps already done under
# $(BUILD)/science are kept (a rerun continues). SCIENCE_CONFIG picks
# another configuration (experiments/science/cluster.toml on a cluster).
SCIENCE_CONFIG ?= experiments/science/local.toml
science: build
	/usr/bin/python3 experiments/science/run.py --config $(SCIENCE_CONFIG) --work $(BUILD)/science \
	  --binary $(BUILD)/bin/hybrid3d

clean:
	rm -rf $(BUILD)
