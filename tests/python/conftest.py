# SPDX-License-Identifier: MIT
"""Shared fixtures for the tests of the Python package (stoker.Loader, stoker.Samples).

The package under test is the one built into $STOKER_BUILD_DIR/python
(default build-rel): run with PYTHONPATH=build-rel/python, as
tests/run_all.sh does; when stoker is not importable this conftest adds
that directory itself. Every data file is generated in pytest's tmp dirs:

  sample_dir      tools/make_sample_dataset.py --count 120 --per-shard 20:
                  6 shards of 20 real-photo JPEGs (KEY.jpg + KEY.cls), made
                  once per run (photos come from Debian packages cached in
                  build-data/photos-cache, fetched with apt-get download when
                  missing) and copied into each pytest-xdist worker's own
                  directory;
  dataset         those samples in storage order: key, url, jpg and cls bytes;
  even_shards     the 6 shards as written;
  uneven_shards   the same 120 samples re-packed into 7 shards of
                  UNEVEN_SIZES samples (WebDataset TarWriter layout);
  uneven_dataset  their samples in storage order;
  write_shard     a function writing Sample tuples as a shard;
  noise_shard     one shard of 40 small random-pixel JPEGs;
  transform_tool  tests/tools/transform_tool of the build (see its docstring);
  clean_env_factory  environments for subprocesses (no launcher rank
                  variables, PYTHONPATH reaching the stoker under test).

Tests run two at a time (pytest-xdist, tests/run_all.sh) unless marked
`serial` (see pytest_configure below and docs/tests.md).

No test may hang: the watchdog plugin (watchdog.py) names a test that runs
too long, dumps every thread's stack where the terminal sees it and ends the
run; subprocesses get timeouts.
"""
import fcntl
import importlib.util
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from collections import namedtuple
from pathlib import Path

import pytest
from watchdog import _watchdog  # noqa: F401  (an autouse fixture: importing registers it)

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("STOKER_BUILD_DIR", REPO / "build-rel"))
PHOTO_CACHE = REPO / "build-data" / "photos-cache"
DATASET_TIMEOUT_S = 600  # the first run may download the photo packages
UNEVEN_SIZES = (3, 17, 5, 40, 9, 26, 20)
TAR_MTIME = 946684800

# Launcher variables stoker reads for its rank: a test run started under
# torchrun/Slurm/MPI must not change what the tests see.
RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
            "LOCAL_WORLD_SIZE", "GROUP_RANK", "SLURM_NTASKS_PER_NODE", "SLURM_NNODES", "SLURM_NODEID",
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")

# The indexes len() builds and remembers go to a directory of this run (and
# its subprocesses), not ~/.cache/stoker.
os.environ.setdefault("STOKER_INDEX_DIR", tempfile.mkdtemp(prefix="stoker-index-"))

if importlib.util.find_spec("stoker") is None:
    sys.path.insert(0, str(BUILD_DIR / "python"))

Sample = namedtuple("Sample", "key url jpg cls label")


def pytest_configure(config):
    # tests/run_all.sh runs the tests without this marker two at a time (pytest-xdist) and those
    # with it afterwards, one at a time.
    config.addinivalue_line(
        "markers", "serial: runs alone: asserts memory, a latency or a thread's share of the "
        "CPU, which a test running beside it would change")


@pytest.fixture(autouse=True)
def _no_rank_env(monkeypatch):
    for name in RANK_ENV:
        monkeypatch.delenv(name, raising=False)


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
    pkg_parent = str(Path(importlib.util.find_spec("stoker").origin).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in
                                                       env.get("PYTHONPATH", "").split(os.pathsep)
                                                       if p])
    env.update({k: str(v) for k, v in extra.items()})
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script, world, args, env, timeout=180):
    """Run `python -c script RANK WORLD PORT *args` once per rank at the same
    time (a free port for their process group) and return each rank's
    stdout parsed as JSON, in rank order."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r), str(world), str(port),
                               *map(str, args)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            assert p.returncode == 0, stderr
            out.append(json.loads(stdout))
    finally:
        for p in procs:
            p.kill()
    return out


@pytest.fixture(scope="session")
def clean_env_factory():
    """clean_env_factory(**extra) -> os.environ without launcher rank variables, with
    PYTHONPATH able to import the stoker under test, plus extra."""
    return _clean_env


def run_dir(tmp_path_factory):
    """A directory of this pytest run that its xdist workers share (the parent of
    their own base directories), or the run's base directory without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory):
    # Made once per run, under a lock the workers take in turn (the script
    # leaves a complete directory as it is), then copied: a test that touches
    # a shard (mtime, permissions) touches its worker's copy only.
    count, per_shard = 120, 20
    made = run_dir(tmp_path_factory) / f"sample-data-{count}-{per_shard}"
    cmd = ["/usr/bin/python3", str(REPO / "tools" / "make_sample_dataset.py"), "--out", str(made),
           "--count", str(count), "--per-shard", str(per_shard), "--cache", str(PHOTO_CACHE)]
    with open(f"{made}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL, timeout=DATASET_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make_sample_dataset.py ran past {DATASET_TIMEOUT_S} s", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"make_sample_dataset.py failed ({proc.returncode}):\n{proc.stderr}",
                    pytrace=False)
    out = tmp_path_factory.mktemp("sample-data")
    shutil.copytree(made, out, dirs_exist_ok=True)
    return out


@pytest.fixture(scope="session")
def even_shards(sample_dir):
    shards = sorted(str(p) for p in sample_dir.glob("train-*.tar"))
    assert len(shards) == 6, shards
    return shards


def read_shards(urls):
    """The samples of the shards in storage order (shard by shard, tar order)."""
    out = []
    for url in urls:
        members = {}
        order = []
        with tarfile.open(url) as tf:
            for m in tf.getmembers():
                key, ext = m.name.split(".", 1)
                if key not in members:
                    members[key] = {}
                    order.append(key)
                members[key][ext] = tf.extractfile(m).read()
        for key in order:
            cls = members[key]["cls"]
            out.append(Sample(key, url, members[key]["jpg"], cls, int(cls)))
    return out


@pytest.fixture(scope="session")
def dataset(even_shards):
    samples = read_shards(even_shards)
    assert len(samples) == 120 and len({s.key for s in samples}) == 120
    return samples


def write_shard(path, samples):
    """Write samples like webdataset.TarWriter (sorted extensions, fixed metadata)."""
    with open(path, "wb") as f, tarfile.open(fileobj=f, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        for s in samples:
            for ext, data in (("cls", s.cls), ("jpg", s.jpg)):
                ti = tarfile.TarInfo(f"{s.key}.{ext}")
                ti.size, ti.mtime, ti.mode = len(data), TAR_MTIME, 0o444
                ti.uname = ti.gname = "bigdata"
                tf.addfile(ti, io.BytesIO(data))
    return str(path)


@pytest.fixture(scope="session")
def noise_shard(tmp_path_factory):
    """One shard of 40 small JPEGs of random pixels (KEY.jpg + KEY.cls, labels 0..39)."""
    import numpy as np
    path = tmp_path_factory.mktemp("noise") / "shard.tar"
    rng = np.random.default_rng(1)
    with tarfile.open(path, "w") as tar:
        for n in range(40):
            add_noise_sample(tar, rng, f"{n:04d}", n, (40, 50, 3))
    return str(path)


def add_noise_sample(tar, rng, key, label, shape):
    """Append KEY.jpg (random pixels of shape from rng) and KEY.cls (label) to tar."""
    import numpy as np
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(buf, "JPEG")
    for ext, data in (("jpg", buf.getvalue()), ("cls", str(label).encode())):
        info = tarfile.TarInfo(f"{key}.{ext}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.fixture(name="write_shard", scope="session")
def write_shard_fixture():
    """write_shard(path, samples) -> str path; samples are conftest.Sample."""
    return write_shard


@pytest.fixture(scope="session")
def uneven_shards(tmp_path_factory, dataset):
    assert sum(UNEVEN_SIZES) == len(dataset)
    out = tmp_path_factory.mktemp("uneven")
    paths, start = [], 0
    for i, n in enumerate(UNEVEN_SIZES):
        paths.append(write_shard(out / f"uneven-{i:06d}.tar", dataset[start:start + n]))
        start += n
    return paths


@pytest.fixture(scope="session")
def uneven_dataset(uneven_shards):
    """The samples of uneven_shards in storage order."""
    return read_shards(uneven_shards)


@pytest.fixture(scope="session")
def transform_tool():
    """tests/tools/transform_tool of $STOKER_BUILD_DIR (default build-rel), or,
    when that build has the unit tests disabled, of build-asan (the same C
    code; its output is compared byte for byte, so a difference between the
    two builds would show up as a failure)."""
    candidates = [BUILD_DIR / "tests" / "transform_tool"]
    if "STOKER_BUILD_DIR" not in os.environ:
        candidates.append(REPO / "build-asan" / "tests" / "transform_tool")
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    pytest.fail("no transform_tool in " + ", ".join(map(str, candidates))
                + ": build the unit tests (meson configure BUILD -Dtests=true && ninja -C BUILD)"
                " or set STOKER_BUILD_DIR", pytrace=False)


@pytest.fixture(scope="session")
def stoker_bin():
    """The CLI of the same build (run_all.sh sets STOKER_BIN)."""
    path = os.environ.get("STOKER_BIN") or os.path.join(
        os.path.dirname(__file__), "..", "..", "build-rel", "stoker")
    assert os.access(path, os.X_OK), f"no stoker binary at {path}; set STOKER_BIN"
    return path
