# The two README commands:
#   make demo   install what is missing, build, make a sample dataset from
#               photographs shipped by Debian, and benchmark reading it
#   make test   install what is missing and run every test
PYTHON ?= /usr/bin/python3
DATA ?= build-data/sample-data

.PHONY: demo test deps build clean fuzz bench-raw bench-decode bench-python bench-remote bench-cluster bench-hooks

deps:
	sh tools/install_deps.sh

build-rel/build.ninja:
	meson setup build-rel -Dbuildtype=release

build: deps build-rel/build.ninja
	ninja -C build-rel

$(DATA)/.complete: tools/make_sample_dataset.py
	$(PYTHON) tools/make_sample_dataset.py --out $(DATA) --cache build-data/photos-cache

demo: build $(DATA)/.complete
	./build-rel/stoker ls $(DATA)/train-000000.tar | head -n 3
	./build-rel/stoker bench --threads 2 $(DATA)/train-*.tar
	./build-rel/stoker bench --threads 2 --decode train --size 224 $(DATA)/train-*.tar

test: deps
	sh tests/run_all.sh

fuzz:
	STOKER_FUZZ=1 sh tools/install_deps.sh
	CC=clang meson setup build-fuzz -Dfuzzing=true -Dbuildtype=debug --reconfigure || \
	  CC=clang meson setup build-fuzz -Dfuzzing=true -Dbuildtype=debug
	ninja -C build-fuzz

clean:
	rm -rf build-rel build-asan build-tsan build-fuzz build-data

# Raw tar reading against cat(1), page cache warm (README figures).
bench-raw: build $(DATA)/.complete
	$(PYTHON) bench/raw_read.py --copies 4 --rounds 5 $(DATA)/train-*.tar

# Decode + train transform against torchvision DataLoader + PIL, pinned cores.
bench-decode: build $(DATA)/.complete
	$(PYTHON) bench/decode_vs_torchvision.py --rounds 3 $(DATA)/train-*.tar

# Python iteration (stoker.Loader) against the C benchmark, same threads.
bench-python: build $(DATA)/.complete
	PYTHONPATH=build-rel/python $(PYTHON) bench/python_overhead.py --rounds 3 $(DATA)/train-*.tar

# Decode over http through a 100 ms round-trip proxy against local disk.
bench-remote: build $(DATA)/.complete
	$(PYTHON) bench/remote_vs_local.py --pin --threads 1 --rounds 5 --samples-per-rank 8000 $(DATA)/train-*.tar
	$(PYTHON) bench/remote_vs_local.py --rounds 5 --samples-per-rank 8000 $(DATA)/train-*.tar

# User hooks: 2 hook processes against 1, and against DataLoader + the same Compose.
bench-hooks: build $(DATA)/.complete
	PYTHONPATH=build-rel/python $(PYTHON) bench/hooks_vs_dataloader.py --rounds 3 $(DATA)/train-00000[0-1].tar

# A trainer on one core alone, then with one Dask worker on another core.
bench-cluster: build $(DATA)/.complete
	$(PYTHON) bench/cluster_offload.py --rounds 3 $(DATA)/train-*.tar
