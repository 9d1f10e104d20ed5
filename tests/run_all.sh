#!/bin/sh
# SPDX-License-Identifier: MIT
# Run every test: the unit tests and fuzz corpus replay under ASan+UBSan,
# the threaded tests (and the remote sources through the CLI) under TSan, and the pytest integration suite against
# the ASan build of the CLI. Each tree builds only what it runs: build-asan
# everything (all its tests, and the CLI and test tools the integration
# tests use), build-tsan the CLI and the suite 'threaded' (meson test builds
# a suite's executables), build-rel the CLI, the extension and the
# transform tool. Prints each tree's build and run time and the ten slowest
# tests, and ends with one line "N passed, N failed".
#
# Where the time goes (docs/tests.md): the pixel comparisons with Pillow and
# torchvision run once, against the release build's tools (marker `pixels`),
# not under ASan at twice the cost; the tests of remote sources, which spend
# their time waiting on servers, stalls and credential expiry, run two at a
# time (pytest-xdist), the rest of tests/integration one at a time because
# they time or measure themselves; tests/python runs two at a time but for
# the tests marked `serial`, which run alone after the others.
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
status=0
TIMES=$(mktemp)
trap 'rm -f "$TIMES"' EXIT
clock() { date +%s; }
# tree, what (build or run), start time: one line of the closing summary
took() { echo "$1 $2 $(($(clock) - $3)) s" >>"$TIMES"; }

setup() { # dir, meson args...
    dir=$1; shift
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

# The CPython extension is tested from the release build: an ASan-built
# module cannot be loaded into Debian's uninstrumented python3.
# -Dtest_hooks=true: the library reads the environment variables that only
# tests set (STOKER_CACHE_TEST_FILL_DELAY_MS).
t=$(clock)
setup build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
    -Dpython=false -Dtest_hooks=true || exit 1
ninja -C build-asan || exit 1
took build-asan build "$t"
t=$(clock)
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    meson test -C build-asan --print-errorlogs --num-processes 2 || status=1
took build-asan meson-test "$t"

t=$(clock)
setup build-tsan -Dbuildtype=debug -Db_sanitize=thread -Dpython=false -Dtest_hooks=true || exit 1
ninja -C build-tsan stoker || exit 1
# meson test builds the suite's executables, and only those.
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    meson test -C build-tsan --print-errorlogs --suite threaded || status=1
took build-tsan build+meson-test "$t"
t=$(clock)

# Remote sources under TSan (http, pipe:, s3://): reader threads share libcurl's handle pool and
# DNS/TLS share, pipeline stops cancel sources waiting on the network, and temporary cloud
# credentials are one cache that every reader thread reads while one of them refreshes it.
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 STOKER_BIN=$PWD/build-tsan/stoker \
    "$PYTHON" -m pytest -q -p no:cacheprovider -n 2 --junitxml=build-tsan/pytest-remote.xml \
    -k "nginx or drop or stall or early or sigv4_every or range_resume or s3rver_epochs or long_run or temporary" \
    tests/integration/test_remote_http.py tests/integration/test_pipe.py \
    tests/integration/test_s3.py tests/integration/test_cloud_creds.py || status=1

# Shard jobs under TSan: stoker index and stoker verify run one shard per thread.
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 STOKER_BIN=$PWD/build-tsan/stoker \
    "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml=build-tsan/pytest-jobs.xml \
    tests/integration/test_verify.py tests/integration/test_index.py || status=1
took build-tsan pytest "$t"

# The remote sources' tests wait on their servers far more than they compute: two at a time.
remote="tests/integration/test_remote_http.py tests/integration/test_pipe.py
tests/integration/test_s3.py tests/integration/test_cloud_creds.py tests/integration/test_remote_cache.py"
t=$(clock)
# shellcheck disable=SC2086
STOKER_BIN=$PWD/build-asan/stoker "$PYTHON" -m pytest -q -p no:cacheprovider -n 2 \
    --junitxml=build-asan/pytest-remote.xml $remote || status=1
took build-asan pytest-remote "$t"
t=$(clock)
ignore=$(for f in $remote; do printf ' --ignore=%s' "$f"; done)
# shellcheck disable=SC2086
STOKER_BIN=$PWD/build-asan/stoker "$PYTHON" -m pytest -q -p no:cacheprovider -m "not pixels" \
    --junitxml=build-asan/pytest.xml $ignore tests/integration || status=1
took build-asan pytest "$t"

t=$(clock)
setup build-rel -Dbuildtype=release || exit 1
# The extension's file name holds the Python version: ask ninja for it.
extension=$(ninja -C build-rel -t targets all | sed -n 's|^\(python/stoker/_ext/_stoker[^:]*\.so\):.*|\1|p')
ninja -C build-rel stoker tests/transform_tool tests/resize_tool $extension || exit 1
took build-rel build "$t"
t=$(clock)
# The image tools' pixels against Pillow and torchvision, on the build users run.
STOKER_BUILD_DIR=$PWD/build-rel STOKER_BIN=$PWD/build-rel/stoker "$PYTHON" -m pytest -q \
    -p no:cacheprovider -m pixels --junitxml=build-rel/pytest-pixels.xml \
    tests/integration/test_image_vs_torchvision.py tests/integration/test_resize_vs_pil.py || status=1
took build-rel pytest-pixels "$t"
t=$(clock)
# The Python package's tests start processes and servers and wait on them: two at a time, but
# for those marked `serial` (they measure memory, a latency or a thread's share of the CPU),
# which run after them, one at a time.
PYTHONPATH=$PWD/build-rel/python STOKER_BIN=$PWD/build-rel/stoker "$PYTHON" -m pytest -q \
    -p no:cacheprovider --strict-markers -n 2 --dist loadgroup -m "not serial" \
    --junitxml=build-rel/pytest-python.xml tests/python || status=1
took build-rel pytest "$t"
t=$(clock)
PYTHONPATH=$PWD/build-rel/python STOKER_BIN=$PWD/build-rel/stoker "$PYTHON" -m pytest -q \
    -p no:cacheprovider --strict-markers -m serial \
    --junitxml=build-rel/pytest-python-serial.xml tests/python || status=1
took build-rel pytest-serial "$t"

cat "$TIMES"
"$PYTHON" tests/summarize.py build-asan/meson-logs/testlog.json \
    build-tsan/meson-logs/testlog.json build-tsan/pytest-remote.xml build-tsan/pytest-jobs.xml \
    build-asan/pytest-remote.xml build-asan/pytest.xml build-rel/pytest-pixels.xml \
    build-rel/pytest-python.xml build-rel/pytest-python-serial.xml || status=1
exit $status
