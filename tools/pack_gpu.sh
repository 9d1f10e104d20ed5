#!/bin/sh
# SPDX-License-Identifier: MIT
# Fill a folder with everything bench/gpu_run.sh needs on a GPU host that has
# Python 3.12, torch, torchvision, gcc and Python.h but none of stoker's
# Debian libraries and no package registry (issue 25):
#   src.tar                 this checkout's committed tree (git archive HEAD)
#   libstoker_internal.a    the library, built here (release, PIC); the host
#                           links the CPython extension against it
#   libs.tar.xz             the shared libraries it needs (ldd closure, without
#                           glibc, libstdc++ and libgcc_s, which the host has)
#   photos/                 the sample set's source photos, laid out as
#                           tools/make_sample_dataset.py's --cache expects
# usage: tools/pack_gpu.sh DEST PHOTOS_CACHE   (run from the repository root)
set -eu
dest=$(mkdir -p "$1" && cd "$1" && pwd)
cache=$2
build=${BUILD:-build-gpu-pack}

meson setup "$build" --buildtype=release -Dtests=false -Dpython=false >/dev/null 2>&1 ||
    meson setup --reconfigure "$build" --buildtype=release -Dtests=false -Dpython=false >/dev/null
ninja -C "$build" -j2 libstoker_internal.a libstoker.so.0.1.0 >/dev/null

rm -rf "$dest"
mkdir -p "$dest/photos"
git archive -o "$dest/src.tar" HEAD
# meson's internal static library is a thin archive (paths to the objects):
# the host needs the objects themselves.
(cd "$build" && ar rcs "$dest/libstoker_internal.a" $(ar t libstoker_internal.a))

libs=$(mktemp -d)
ldd "$build/libstoker.so.0.1.0" | awk '/=> \//{print $3}' |
    grep -vE '/(libc|libm|libresolv|libstdc\+\+|libgcc_s|libpthread|libdl)\.so' |
    while read -r lib; do cp -L "$lib" "$libs/"; done
tar -C "$libs" -cJf "$dest/libs.tar.xz" .
rm -rf "$libs"

# Only the photos the generator uses (it finds them by these globs).
${PYTHON:-/usr/bin/python3} - "$cache" "$dest/photos" <<'EOF'
import os, shutil, sys
sys.path.insert(0, "tools")
import make_sample_dataset as m
cache, out = sys.argv[1:]
for package in m.PHOTO_PACKAGES:
    for s in m.find_photos(package, os.path.join(cache, package.name)):
        dst = os.path.join(out, package.name, s.debian_path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy(s.path, dst)
EOF
du -sh "$dest"
