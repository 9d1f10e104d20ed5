#!/bin/bash
# SPDX-License-Identifier: MIT
# On the GPU host: probe it, build stoker's CPython extension there, generate
# the dataset, run bench/gpu_resnet50.py (issue 25). CARRY is the folder
# tools/pack_gpu.sh filled; results and the log go to OUT_DIR (a cut-off run
# still leaves the log and the JSON of every stage done).
# usage: [COUNT=25000] bench/gpu_run.sh CARRY OUT_DIR [BUDGET_SECONDS [GPU_RESNET50_ARGS...]]
# (e.g. COUNT=400 PER_SHARD=50 ... 200 --cpu-rehearsal on a machine without a GPU)
# With BENCH_CMD set, the stoker command is built too and BENCH_CMD runs
# instead of the GPU benchmark (DATA, STOKER and PY name the dataset, the
# command and the interpreter): the host's idle cores, pinned with taskset,
# give a CPU benchmark a quiet machine, e.g.
#   COUNT=2000 PER_SHARD=250 GRAIN=16 (the sample set make demo builds)
#   BENCH_CMD='$PY bench/recipe_vs_torchvision.py --stoker $STOKER $DATA/*.tar'
set -u
carry=$(cd "$1" && pwd)
out=$2
budget=${3:-380}
shift $(($# < 3 ? $# : 3))
src=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-/tmp/stoker-gpu}
start=$(date +%s)
mkdir -p "$out" "$work"
exec > >(tee -a "$out/run.log") 2>&1
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
elapsed() { echo $(($(date +%s) - start)); }

echo "== probe ($(elapsed) s)"
uname -srm
nproc
lscpu | grep -E '^(Model name|Thread|Core|Socket|CPU\(s\)|NUMA node\(s\))' 
free -g | head -2
command -v "$py" gcc cc nvcc
gcc --version 2>&1 | head -1
ldd --version 2>&1 | head -1
pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
"$py" -V
ls -l "$pyinc/Python.h" || echo "no Python.h under $pyinc"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
"$py" -c 'import torch, torchvision, PIL; print("torch", torch.__version__, "torchvision", torchvision.__version__, "pillow", PIL.__version__)'

echo "== libraries ($(elapsed) s)"
mkdir -p "$work/lib" "$work/py"
tar -xJf "$carry/libs.tar.xz" -C "$work/lib"
# Where the host has a library (a newer one, same soname), it is used
# (PREFER_HOST=0: the carried ones, as a rehearsal on the packing machine).
if [ "${PREFER_HOST:-1}" = 1 ]; then
    for f in "$work"/lib/*; do
        name=$(basename "$f")
        if ldconfig -p | awk '{print $1}' | grep -qxF "$name"; then rm "$f"; echo "host has $name"; fi
    done
fi
echo "carried: $(ls "$work/lib" | tr '\n' ' ')"

echo "== build the extension ($(elapsed) s)"
(cd "$src/python" && find stoker -name "*.py" -exec cp --parents {} "$work/py/" \;)
# The same sources meson's python/stoker/_ext/meson.build compiles, linked against
# the library built on the packing machine; DT_RPATH (not RUNPATH) so that the
# carried libraries' own dependencies are found there too.
gcc -O2 -shared -fPIC -std=c11 -D_GNU_SOURCE -I"$src/include" -I"$src/src" -I"$pyinc" \
    "$src"/python/stoker/_ext/*.c "$carry/libstoker_internal.a" \
    -L"$work/lib" -l:libarchive.so.13 -l:libjpeg.so.62 -l:libspng.so.0 -l:libcjson.so.1 \
    -l:libyajl.so.2 -l:libcurl.so.4 -l:libexpat.so.1 -l:libz.so.1 -lm -lpthread \
    -Wl,--disable-new-dtags,-rpath,"$work/lib" -o "$work/py/stoker/_ext/_stoker$suffix" || exit 1
export PYTHONPATH=$work/py
if [ -n "${BENCH_CMD:-}" ]; then
    gcc -O2 -std=c11 -D_GNU_SOURCE -I"$src/include" "$src"/cli/*.c "$carry/libstoker_internal.a" \
        -L"$work/lib" -l:libarchive.so.13 -l:libjpeg.so.62 -l:libspng.so.0 -l:libcjson.so.1 \
        -l:libyajl.so.2 -l:libcurl.so.4 -l:libexpat.so.1 -l:libz.so.1 -lm -lpthread \
        -Wl,--disable-new-dtags,-rpath,"$work/lib" -o "$work/stoker" || exit 1
fi
"$py" -c 'import stoker; print("stoker", stoker._ext._stoker.version, stoker.__file__)' || exit 1

echo "== dataset ($(elapsed) s)"
count=${COUNT:-25000}
per_shard=${PER_SHARD:-250}
t=$(date +%s)
"$py" "$src/tools/make_sample_dataset.py" --out "$work/data" --cache "$carry/photos" \
    --count $count --per-shard $per_shard --grain ${GRAIN:-22} --jobs "$(nproc)" 2>&1 | grep -v "wrote train"
echo "dataset in $(($(date +%s) - t)) s"

echo "== benchmark ($(elapsed) s)"
if [ -n "${BENCH_CMD:-}" ]; then
    cd "$src" && DATA=$work/data STOKER=$work/stoker PY=$py bash -c "$BENCH_CMD" 2>&1
    echo "== done ($(elapsed) s)"
    exit 0
fi
"$py" "$src/bench/gpu_resnet50.py" --data "$work/data" --imagefolder "$work/folder" \
    --json "$out/gpu_resnet50.json" --budget $((budget - $(elapsed))) "$@"
echo "== done ($(elapsed) s)"
