#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`stoker index` of local shards (a header scan that seeks over member
data) against the streamed count of the same shards (pipe:cat, the way a
remote shard is counted: every byte read).

For each set of shards, alternating the two each round, pinned to one core
(taskset): bytes read by read(2) (rchar, /proc/self/io: a reaped child's
reads are accounted to its parent; streamed, both cat's and stoker's) and wall seconds; prints the
median of each and the ratios streamed/scan. The page cache is warm (each
set is read once first), so the seconds are CPU and syscall cost, not disk;
the generated set is measured again with its pages dropped before each run
(POSIX_FADV_DONTNEED on its own files only): bytes from storage
(/proc/self/io read_bytes) and seconds as from disk.

Sets: the shards given (the sample dataset in `make bench-index`), and
--members N generated small samples (a .jpg of 2-30 KB of random bytes and a
.cls each, 5,000 per shard) in a temporary directory.

usage: bench/index_scan.py [--stoker build-rel/stoker] [--rounds 5]
                           [--members 20000] [--cpu 0] SHARD...
"""
import argparse
import io
import os
import random
import statistics
import subprocess
import tarfile
import tempfile
import time


def io_counts():
    """(rchar, read_bytes): bytes read through read(2), and from storage."""
    with open("/proc/self/io") as f:
        fields = dict(line.split(":") for line in f)
    return int(fields["rchar"]), int(fields["read_bytes"])


def evict(shards):
    """Drop the shards' pages from the page cache (only these files), so
    the next run reads them from storage."""
    for s in shards:
        fd = os.open(s, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def write_small_shards(directory, members, sizes, per_shard=5000):
    rng = random.Random(0)
    paths = []
    for start in range(0, members, per_shard):
        path = os.path.join(directory, f"small-{start // per_shard:06d}.tar")
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
            for i in range(start, min(start + per_shard, members)):
                for ext, data in (("cls", b"%d" % (i % 1000)),
                                  ("jpg", rng.randbytes(rng.randint(*sizes)))):
                    ti = tarfile.TarInfo(f"{i:08d}.{ext}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
        paths.append(path)
    return paths


def measure(cmd, cpu, shards, cold):
    if cold:
        evict(shards)
    before, t0 = io_counts(), time.perf_counter()
    subprocess.run(["taskset", "-c", str(cpu), *cmd], check=True, stdout=subprocess.DEVNULL)
    t = time.perf_counter() - t0
    after = io_counts()
    return after[0] - before[0], t, after[1] - before[1]


def compare(name, stoker, shards, rounds, cpu, workdir, cold=False):
    out = os.path.join(workdir, "index.json")
    scan = [stoker, "index", "-q", "--threads", "1", "--force", "-o", out, *shards]
    streamed = [stoker, "index", "-q", "--threads", "1", "--force", "--allow-pipe", "-o", out,
                *(f"pipe:cat {s}" for s in shards)]
    for s in shards:  # warm the page cache
        with open(s, "rb") as f:
            while f.read(1 << 20):
                pass
    results = {"scan": [], "streamed": []}
    for _ in range(rounds):
        for kind, cmd in (("scan", scan), ("streamed", streamed)):
            results[kind].append(measure(cmd, cpu, shards, cold))
    size = sum(os.path.getsize(s) for s in shards)
    med = {k: [statistics.median(r[i] for r in v) for i in range(3)] for k, v in results.items()}
    print(f"{name}: {len(shards)} shards, {size / 1e6:.1f} MB, page cache "
          f"{'dropped before each run' if cold else 'warm'}")
    for kind in ("scan", "streamed"):
        print(f"  {kind:9s} read {med[kind][0] / 1e6:9.2f} MB ({med[kind][2] / 1e6:9.2f} MB from "
              f"storage)  {med[kind][1]:7.3f} s (median of {rounds})")
    # Streamed, the shard bytes are read twice: by cat from the file and by
    # stoker from the pipe; a remote shard is read once, from the network.
    print(f"  the scan reads {med['scan'][0] / size:.3f} of the shard bytes; a streamed count "
          f"takes {med['streamed'][1] / med['scan'][1]:.1f}x its seconds")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--members", type=int, default=20000)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--jpg-bytes", default="2000,30000",
                    help="smallest,largest .jpg of the generated samples")
    ap.add_argument("shards", nargs="*")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stoker-bench-index-") as workdir:
        if args.shards:
            compare("given shards", args.stoker, args.shards, args.rounds, args.cpu, workdir)
        if args.members:
            small = write_small_shards(workdir, args.members,
                                       [int(x) for x in args.jpg_bytes.split(",")])
            for cold in (False, True):
                compare(f"{args.members} generated samples", args.stoker, small, args.rounds,
                        args.cpu, workdir, cold)


if __name__ == "__main__":
    main()
