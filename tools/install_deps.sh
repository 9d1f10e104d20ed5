#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian 12 packages stoker needs to build, test and run its
# demo, and nothing when they are all present already (so repeated runs and
# CI on a prepared machine do not touch apt).
set -eu

packages="build-essential meson ninja-build pkg-config libarchive-dev libcmocka-dev
libjpeg62-turbo-dev libspng-dev libcjson-dev python3-dev
python3 python3-pil python3-numpy python3-pytest python3-torch python3-torchvision
tar gzip zstd bzip2 xz-utils dpkg-dev time strace
libcurl4-openssl-dev libssl-dev libexpat1-dev libyajl-dev zlib1g-dev ca-certificates nginx-light python3-botocore nodejs
python3-distributed python3-prometheus-client python3-pytest-xdist python3-jwt python3-cryptography
python3-mesonpy patchelf python3-pip python3-venv"
# Fuzzing (optional, `make fuzz`) additionally needs clang and its runtime.
if [ "${STOKER_FUZZ:-0}" = 1 ]; then
    packages="$packages clang libclang-rt-14-dev"
fi
# WebDataset from a checkout (`make bench-first-batch WEBDATASET=DIR/src`;
# not a Debian package) needs braceexpand, which is one.
if [ "${STOKER_WEBDATASET:-0}" = 1 ]; then
    packages="$packages python3-braceexpand"
fi

missing=""
for p in $packages; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
        *"install ok installed"*) ;;
        *) missing="$missing $p" ;;
    esac
done
# Debian's nodejs lacks npm (a package of its own); NodeSource's includes it.
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
    echo "installing:$missing"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# s3rver (an S3 emulator for tests/integration/test_s3.py) comes from the npm
# registry into build-npm/, which git ignores; the tests install it there
# themselves when missing, and fail with the reason when npm cannot.
cd "$(dirname "$0")/.."
if [ ! -x build-npm/node_modules/.bin/s3rver ]; then
    npm install --prefix build-npm --no-audit --no-fund s3rver@3.7.1 >/dev/null ||
        echo "warning: cannot install s3rver from the npm registry; test_s3.py will fail its s3rver tests" >&2
fi
