# The two README commands:
#   make demo   install what is missing, build, make a sample dataset from
#               photographs shipped by Debian, and benchmark reading it
#   make test   install what is missing and run every test
PYTHON ?= /usr/bin/python3
DATA ?= build-data/sample-data
# Smaller photos (short side 250-500 px) for the figures that per-image fixed
# costs dominate; built from the same Debian photos as DATA.
SMALL_DATA ?= build-data/small-data
PHOTOS_CACHE ?= build-data/photos-cache

.PHONY: demo test deps build clean fuzz bench-raw bench-index bench-decode bench-python bench-remote bench-cluster \
	bench-gpu gpu-pack bench-recipe \
	bench-shuffle bench-shuffle-sim bench-hooks bench-compare bench-nodes bench-first-batch bench-http-first-batch

deps:
	sh tools/install_deps.sh

build-rel/build.ninja:
	meson setup build-rel -Dbuildtype=release

build: deps build-rel/build.ninja
	ninja -C build-rel

$(DATA)/.complete: tools/make_sample_dataset.py
	$(PYTHON) tools/make_sample_dataset.py --out $(DATA) --cache $(PHOTOS_CACHE)

$(SMALL_DATA)/.complete: tools/make_sample_dataset.py
	$(PYTHON) tools/make_sample_dataset.py --small --out $(SMALL_DATA) --cache $(PHOTOS_CACHE)

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

# Raw tar reading against cat(1), page cache warm (docs/performance.md).
bench-raw: build $(DATA)/.complete
	$(PYTHON) bench/raw_read.py --copies 4 --rounds 5 $(DATA)/train-*.tar

# `stoker index` of local shards (headers read, member data seeked over)
# against a streamed count of the same shards, on the sample set and 20,000
# generated small samples (writes ~360 MB in /tmp).
bench-index: build $(DATA)/.complete
	$(PYTHON) bench/index_scan.py --rounds 5 --members 20000 $(DATA)/train-*.tar
	$(PYTHON) bench/index_scan.py --rounds 5 --members 2000 --jpg-bytes 60000,120000

# This build's stoker against another build's (BASE=DIR/stoker, e.g. main
# built in another directory): the stoker halves of bench-raw and
# bench-decode, alternating the two, and new/base with each one's spread.
bench-compare: build $(DATA)/.complete
	$(PYTHON) bench/compare_builds.py --base $(BASE) --new build-rel/stoker --rounds 5 \
	    $(DATA)/train-*.tar

# Decode + train transform against torchvision DataLoader + PIL and
# libjpeg-turbo alone, pinned cores, on the sample set and the small photos.
bench-decode: build $(DATA)/.complete $(SMALL_DATA)/.complete
	$(PYTHON) bench/decode_vs_torchvision.py --rounds 3 --name sample $(DATA)/train-*.tar
	$(PYTHON) bench/decode_vs_torchvision.py --rounds 3 --name small $(SMALL_DATA)/train-*.tar

# Python iteration (stoker.Loader) against the C benchmark, same threads.
bench-python: build $(DATA)/.complete
	PYTHONPATH=build-rel/python $(PYTHON) bench/python_overhead.py --rounds 3 $(DATA)/train-*.tar

# Time and bytes before the first batch (fresh, the second epoch, a resume;
# local and over http +100 ms): stoker defaults, index=, start_prefetch(),
# and WebDataset from a checkout when WEBDATASET=DIR/src is given (it is
# not part of stoker); docs/performance.md, "The first batch".
WEBDATASET ?=
bench-first-batch: build $(DATA)/.complete
	$(if $(WEBDATASET),STOKER_WEBDATASET=1 sh tools/install_deps.sh)
	PYTHONPATH=build-rel/python $(PYTHON) bench/first_batch.py --rounds 3 \
	  $(if $(WEBDATASET),--webdataset $(WEBDATASET)) $(DATA)/train-*.tar

# The http first batch taken apart: local, nginx, the proxy at 0/50/250 ms
# each way, CPU of stoker and of the proxy, GETs, curl's own throughput.
bench-http-first-batch: build $(DATA)/.complete
	PYTHONPATH=build-rel/python $(PYTHON) bench/http_first_batch.py --rounds 5 $(DATA)/train-*.tar

# Decode over http through a 100 ms round-trip proxy against local disk.
bench-remote: build $(DATA)/.complete
	$(PYTHON) bench/remote_vs_local.py --pin --threads 1 --rounds 5 --samples-per-rank 8000 $(DATA)/train-*.tar
	$(PYTHON) bench/remote_vs_local.py --rounds 5 --samples-per-rank 8000 $(DATA)/train-*.tar

# The torchvision reference recipe (TrivialAugmentWide, RandomErasing,
# Mixup/CutMix, crop 176): stoker against DataLoader(2 workers), pinned.
bench-recipe: build $(DATA)/.complete
	PYTHONPATH=build-rel/python $(PYTHON) bench/recipe_vs_torchvision.py --rounds 3 $(DATA)/train-*.tar

# User hooks: 2 hook processes against 1, and against DataLoader + the same Compose.
bench-hooks: build $(DATA)/.complete
	PYTHONPATH=build-rel/python $(PYTHON) bench/hooks_vs_dataloader.py --rounds 3 $(DATA)/train-00000[0-1].tar
	PYTHONPATH=build-rel/python $(PYTHON) bench/hooks_cluster.py --rounds 3 $(DATA)/train-00000[0-3].tar

# A trainer on one core alone, then with one Dask worker on another core.
bench-cluster: build $(DATA)/.complete
	$(PYTHON) bench/cluster_offload.py --rounds 3 $(DATA)/train-*.tar

# A compiled ResNet-50 fed by stoker and by the DataLoader against its ceiling,
# on a machine with a CUDA GPU and torch >= 2 (docs/performance.md, "On a GPU").
bench-gpu: build $(DATA)/.complete
	PYTHONPATH=build-rel/python $(PYTHON) bench/gpu_resnet50.py --data $(DATA)

# For a GPU host without stoker's libraries: pack .gpu/ here, then run
# `bash bench/gpu_run.sh .gpu OUT_DIR` there (it builds, makes 25,000 images, measures).
gpu-pack: $(DATA)/.complete
	sh tools/pack_gpu.sh .gpu build-data/photos-cache

# A small CNN trained on class-sorted vs mixed shards of the sample set
# (same seed and epochs): validation accuracy within 2 points (issue 19).
bench-shuffle: build $(DATA)/.complete
	PYTHONPATH=build-rel/python taskset -c 0,1 $(PYTHON) bench/shuffle_training.py \
	  --stoker build-rel/stoker --epochs 5 $(DATA)/train-*.tar

# ImageNet-shaped: 1,000 classes x 1,281 tiny samples in class order, shards
# of 10,000: classes per batch of 256 and peak RSS (writes ~1.3 GB in /tmp).
bench-shuffle-sim: build
	PYTHONPATH=build-rel/python $(PYTHON) bench/shuffle_mixing.py --stoker build-rel/stoker

# Two simulated nodes of two ranks reading 5 epochs through one nginx, a
# cache directory each: origin bytes and hit rates per epoch with and
# without node_affinity, eviction by next use against LRU and the optimum,
# and label mixing on class-sorted shards with and without affinity
# (docs/node-cache.md; writes ~80 MB in /tmp).
bench-nodes: build
	PYTHONPATH=build-rel/python $(PYTHON) bench/node_cache.py
