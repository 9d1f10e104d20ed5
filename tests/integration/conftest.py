# SPDX-License-Identifier: MIT
"""Shared fixtures for the stoker CLI integration tests.

The binary under test comes from $STOKER_BIN, else from the first of
build-asan/stoker, build-it/stoker, build-rel/stoker under the repository
root. Every fixture file is generated inside the test's tmp_path.

Samples are dicts in WebDataset's form: {"__key__": "000001", "jpg": b"..."};
make_shard() writes them exactly like webdataset.TarWriter (members of a
sample in sorted extension order, mode 0o444, owner "bigdata", fixed mtime).
"""
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BINARIES = ("build-asan/stoker", "build-it/stoker", "build-rel/stoker")
TIMEOUT_S = 60
MTIME = 1_700_000_000  # fixed, so shards are byte-for-byte reproducible

# Environment variables stoker reads to find its rank; a test runner launched
# under torchrun/SLURM/MPI must not change what the tests see.
RANK_ENV = ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                     "ThreadSanitizer", "runtime error:")

SUMMARY_RE = re.compile(r"^(\d+) samples, (\d+) members, (\d+) bytes"
                        r"(?:; skipped (\d+) samples, (\d+) shards failed, (\d+) members ignored)?$",
                        re.M)


def pytest_configure(config):
    # tests/run_all.sh runs these against the release build and the rest against build-asan.
    config.addinivalue_line(
        "markers", "pixels: compares the pixels of an image tool with Pillow or torchvision; "
        "the sanitizers add nothing that the C unit tests and fuzz replays under them miss")


def find_binary():
    env = os.environ.get("STOKER_BIN")
    if env:
        return Path(env)
    for rel in DEFAULT_BINARIES:
        if (REPO / rel).is_file():
            return REPO / rel
    return None


@pytest.fixture(scope="session")
def stoker():
    """Path of the stoker binary; fails (never skips) when there is none."""
    path = find_binary()
    if path is None:
        pytest.fail("no stoker binary: set STOKER_BIN or build one of "
                    + ", ".join(DEFAULT_BINARIES) + " (e.g. `meson setup build-it "
                    "-Dtests=false -Db_sanitize=address,undefined -Dbuildtype=debug "
                    "&& ninja -C build-it`)", pytrace=False)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"STOKER_BIN={path} is not an executable file", pytrace=False)
    return path


def assert_no_crash(proc):
    """The process ended by itself (no signal) and no sanitizer complained."""
    stderr = proc.stderr or ""
    if isinstance(stderr, bytes):
        stderr = stderr.decode("utf-8", "replace")
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}; stderr:\n{stderr}"
    for marker in SANITIZER_MARKERS:
        assert marker not in stderr, f"sanitizer report ({marker}):\n{stderr}"


@pytest.fixture
def run(stoker):
    """run(args, text=True, env=None, **kw) -> CompletedProcess.

    Runs `stoker *args` with a 60 s timeout (timeout= to change it), stdout and stderr captured unless
    kw redirects them, checks that it did not crash, and returns the result
    (output as str unless text=False). env adds to a copy of the environment
    without rank variables.
    """
    def _run(args, text=True, env=None, **kw):
        full_env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
        full_env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        full_env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        if env:
            full_env.update(env)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("timeout", TIMEOUT_S)
        proc = subprocess.run([str(stoker), *map(str, args)], text=text, env=full_env, **kw)
        assert_no_crash(proc)
        return proc
    return _run


@pytest.fixture
def bench_json(run):
    """bench_json(args, env=None) -> the parsed report of `stoker bench --json
    *args`, which must succeed and print exactly one JSON line."""
    def _bench(args, env=None):
        proc = run(["bench", "--json", *args], env=env)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert len(lines) == 1, proc.stdout
        return json.loads(lines[0])
    return _bench


# --------------------------------------------------------------------------
# Writing shards

def tar_members(samples):
    """(name, bytes) in the order TarWriter writes the members of samples."""
    out = []
    for sample in samples:
        key = sample["__key__"]
        for ext in sorted(k for k in sample if k != "__key__"):
            data = sample[ext]
            out.append((f"{key}.{ext}", data.encode() if isinstance(data, str) else bytes(data)))
    return out


@pytest.fixture(name="tar_members")
def tar_members_fixture():
    """tar_members(samples) -> [(name, bytes)] in the order shards hold them."""
    return tar_members


def tarinfo(name, size=0, type_=tarfile.REGTYPE, linkname=""):
    """A TarInfo with TarWriter's attributes."""
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.type = type_
    ti.linkname = linkname
    ti.mtime = MTIME
    ti.mode = 0o755 if type_ == tarfile.DIRTYPE else 0o444
    ti.uname = ti.gname = "bigdata"
    return ti


# Members stoker must ignore, for the `extra` argument of the shard writers:
# (index, kind, name, arg) adds, before the index-th regular member of the
# samples (len(members) = at the end), a member of kind
#   "dir"      a directory (arg unused),
#   "symlink"  a symbolic link to arg,
#   "hardlink" a hard link to the earlier member named arg,
#   "file"     a regular file holding the bytes arg (a name without a key).
EXTRA_TYPES = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
               "file": tarfile.REGTYPE}


def _interleave(members, extra):
    """Members and extras in archive order: ("member", name, data) or the extra tuple."""
    out = []
    for i in range(len(members) + 1):
        out.extend(e for e in extra if e[0] == i)
        if i < len(members):
            out.append(("member",) + tuple(members[i]))
    return out


def write_shard(path, samples, fmt=tarfile.PAX_FORMAT, extra=(), stream=True, pax_headers=None,
                global_pax=None):
    """Write samples like webdataset.TarWriter with Python's tarfile in format
    fmt, plus the extra members described above. stream=True writes through
    mode "w|" as TarWriter does, False through the seekable mode "w".
    pax_headers maps member names to pax records to add to their headers;
    global_pax, if given, is written as a pax global header first."""
    with open(path, "wb") as f, tarfile.open(fileobj=f, mode="w|" if stream else "w",
                                             format=fmt, pax_headers=global_pax) as tf:
        for item in _interleave(tar_members(samples), extra):
            if item[0] == "member":
                _, name, data = item
                ti = tarinfo(name, len(data))
                ti.pax_headers = dict((pax_headers or {}).get(name, {}))
                tf.addfile(ti, io.BytesIO(data))
            elif item[1] == "file":
                _, _, name, data = item
                tf.addfile(tarinfo(name, len(data)), io.BytesIO(data))
            else:
                _, kind, name, target = item
                tf.addfile(tarinfo(name, type_=EXTRA_TYPES[kind], linkname=target or ""))
    return Path(path)


@pytest.fixture
def make_shard():
    """make_shard(path, samples, fmt=PAX_FORMAT, extra=(), stream=True, pax_headers=None,
    global_pax=None) -> Path, see write_shard."""
    return write_shard


def write_with_holes(path, data, block=4096):
    """Write data, leaving blocks of zeros as holes, so that GNU tar --sparse
    sees a sparse file (it checks the blocks a file occupies on disk)."""
    with open(path, "wb") as f:
        for i in range(0, len(data), block):
            chunk = data[i:i + block]
            if chunk.count(0) == len(chunk):
                f.seek(len(chunk), os.SEEK_CUR)
            else:
                f.write(chunk)
        f.truncate(len(data))


def gnu_tar_shard(path, samples, tar_format, extra=(), options=()):
    """The same archive as write_shard, written by GNU tar --format=tar_format
    (and further options) from files staged next to path."""
    if shutil.which("tar") is None:
        pytest.fail("GNU tar is not installed")
    path = Path(path)
    staging = path.parent / (path.name + ".d")
    names = []
    for item in _interleave(tar_members(samples), extra):
        kind = "file" if item[0] == "member" else item[1]
        name, arg = item[-2], item[-1]
        p = staging / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            write_with_holes(p, arg)
        elif kind == "dir":
            p.mkdir(exist_ok=True)
        elif kind == "symlink":
            p.symlink_to(arg)
        elif kind == "hardlink":
            os.link(staging / arg, p)
        names.append(name)
    listing = path.parent / (path.name + ".files")
    listing.write_bytes(b"".join(n.encode() + b"\0" for n in names))
    subprocess.run(["tar", f"--format={tar_format}", "--no-recursion", "--owner=bigdata:1000",
                    "--group=bigdata:1000", f"--mtime=@{MTIME}", "--mode=a=r",
                    *options, "-cf", str(path), "-C", str(staging), "--null", "-T", str(listing)],
                   check=True, timeout=TIMEOUT_S, capture_output=True)
    return path


@pytest.fixture
def gnu_tar():
    """gnu_tar(path, samples, tar_format, extra=(), options=()) -> Path, see gnu_tar_shard."""
    return gnu_tar_shard


COMPRESSORS = {
    "gz": ["gzip", "-c", "-n"],
    "bz2": ["bzip2", "-c"],
    "xz": ["xz", "-c"],
    "zst": ["zstd", "-c", "-q"],
}


def compress_file(src, suffix):
    """Write src compressed with the command for suffix to src.suffix."""
    cmd = COMPRESSORS[suffix]
    if shutil.which(cmd[0]) is None:
        pytest.fail(f"{cmd[0]} is not installed")
    dst = Path(f"{src}.{suffix}")
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        subprocess.run(cmd, stdin=fin, stdout=fout, check=True, timeout=TIMEOUT_S)
    return dst


@pytest.fixture
def compress():
    """compress(path, suffix) -> Path of path.suffix, suffix in COMPRESSORS."""
    return compress_file


# --------------------------------------------------------------------------
# Expected output

def split_name(name):
    """WebDataset's key/extension split, as stoker documents it; None when
    the member has no key and is ignored."""
    base = name.rsplit("/", 1)[-1]
    if "/" not in name and len(base) >= 4 and base.startswith("__") and base.endswith("__"):
        return None
    dot = base.find(".")
    if dot <= 0:
        return None
    key_len = len(name) - len(base) + dot
    return name[:key_len], name[key_len + 1:].lower()


def listing_of_members(members):
    """`stoker ls` stdout for regular members (name, bytes) in tar order."""
    lines = []
    current = None
    for name, data in members:
        split = split_name(name)
        if split is None:
            continue
        key, ext = split
        if current is None or current[0] != key:
            current = (key, [])
            lines.append(current)
        current[1].append(f"{ext}:{len(data)}")
    return "".join(f"{key}\t{' '.join(parts)}\n" for key, parts in lines)


def ls_expected(samples):
    return listing_of_members(tar_members(samples))


@pytest.fixture
def expected_ls():
    """expected_ls(samples) -> the exact stdout of `stoker ls` on them."""
    return ls_expected


def parse_summary(stderr):
    """The ls summary line as a dict; fails the test if there is none."""
    matches = list(SUMMARY_RE.finditer(stderr))
    assert matches, f"no summary line in stderr:\n{stderr}"
    m = matches[-1]
    return {"samples": int(m[1]), "members": int(m[2]), "bytes": int(m[3]),
            "skipped": int(m[4] or 0), "shards_failed": int(m[5] or 0),
            "ignored": int(m[6] or 0)}


@pytest.fixture
def summary():
    return parse_summary


def make_samples(n, start=0, prefix="", exts=("cls", "jpg", "json"), size=lambda i, j: 10 + i * 7 + j):
    """n deterministic samples with distinct, reproducible bytes."""
    out = []
    for i in range(start, start + n):
        sample = {"__key__": f"{prefix}{i:06d}"}
        for j, ext in enumerate(exts):
            sample[ext] = bytes((i * 31 + j * 7 + k) % 251 for k in range(size(i, j)))
        out.append(sample)
    return out


@pytest.fixture
def samples_factory():
    """samples_factory(n, start=0, prefix="", exts=..., size=...) -> samples."""
    return make_samples


@pytest.fixture
def dataset(tmp_path):
    """dataset(sizes, fmt=PAX) -> list of shard paths tmp_path/shard-{i}.tar
    holding sizes[i] samples each; keys are unique across shards."""
    def _dataset(sizes, fmt=tarfile.PAX_FORMAT, name="shard-{}.tar"):
        paths, start = [], 0
        for i, n in enumerate(sizes):
            paths.append(write_shard(tmp_path / name.format(i), make_samples(n, start=start), fmt))
            start += n
        return paths
    return _dataset


# --------------------------------------------------------------------------
# Resource bounds

# ASan keeps up to 256 MiB of freed memory in quarantine by default, which
# would hide a bound of that order; the measured runs keep it small.
MEASURED_ASAN_OPTIONS = "detect_leaks=1:quarantine_size_mb=16"


class Measured(subprocess.CompletedProcess):
    """A finished stoker run with its peak resident memory (MiB) and the CPU
    seconds it used (user + system: unlike wall time, not stretched by
    whatever else loads the machine, so a bound on it can stay tight)."""
    peak_mib: float
    cpu_s: float


@pytest.fixture
def run_measured(stoker):
    """run_measured(args, env=None, timeout=TIMEOUT_S) -> Measured.

    Runs `stoker *args` as the `run` fixture does, under GNU time, which
    reports the peak RSS of its own child. (A child of the test process
    would not do: Linux carries the high-water mark of the forked copy of
    the parent, a pytest of hundreds of MB, over the exec into the child's
    ru_maxrss.)"""
    import re
    import tempfile

    if not os.access("/usr/bin/time", os.X_OK):
        pytest.fail("/usr/bin/time (GNU time) is not installed", pytrace=False)

    def _run(args, env=None, timeout=TIMEOUT_S):
        full_env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
        full_env["ASAN_OPTIONS"] = MEASURED_ASAN_OPTIONS
        full_env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        if env:
            full_env.update(env)
        with tempfile.NamedTemporaryFile("r") as report:
            proc = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%M %U %S",
                                   str(stoker), *map(str, args)], env=full_env, capture_output=True,
                                  text=True, errors="replace", stdin=subprocess.DEVNULL,
                                  timeout=timeout)
            lines = report.read().splitlines()
        signal = [re.search(r"terminated by signal (\d+)", x) for x in lines]
        signal = [m for m in signal if m]
        if signal:
            proc.returncode = -int(signal[0][1])
        result = Measured(proc.args[4:], proc.returncode, proc.stdout, proc.stderr)
        peak_kib, user_s, system_s = lines[-1].split()
        result.peak_mib = int(peak_kib) / 1024
        result.cpu_s = float(user_s) + float(system_s)
        assert_no_crash(result)
        return result
    return _run
