# SPDX-License-Identifier: MIT
"""stoker.ShardWriter and stoker.Samples under LC_ALL=C and C.UTF-8 (in
subprocesses: a Python process takes its locale when it starts): keys with
é, ü, CJK, bytes that are not UTF-8 (str with surrogate escapes, as
os.fsdecode and Samples give them, or bytes) and names too long for a ustar
header are written as they are, read back the same by Python's tarfile and
by Samples, and give the same shard bytes in every locale."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

LOCALES = ("C", "C.UTF-8")
KEYS = ["plain-0001", "dir-é/s0000200-ü", "中文/キー-0002",
        os.fsdecode(b"latin1-\xe9t\xe9/k\xffy"), "é" * 60 + "/" + "ü" * 40 + "-long"]

SCRIPT = r"""
import json, locale, sys
import stoker
out, keys = sys.argv[1], json.loads(sys.argv[2])
with stoker.ShardWriter(out + "/w-%02d.tar", max_samples=2) as w:
    for i, key in enumerate(keys):
        w.write({"__key__": key, "txt": key.encode("utf-8", "surrogateescape"), "cls": i})
    # A key given as bytes is written as it is.
    w.write({"__key__": b"raw-\xff\xfe", "txt": b"raw"})
got = [(d["__key__"], d["txt"].decode("utf-8", "surrogateescape"))
       for d in stoker.Samples(out + "/w-{00..02}.tar", shuffle=False)]
print(json.dumps({"locale": locale.setlocale(locale.LC_CTYPE), "samples": got}))
"""


def write_and_read(tmp_path, clean_env_factory, locale):
    out = tmp_path / locale
    out.mkdir()
    env = clean_env_factory(LC_ALL=locale)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out), json.dumps(KEYS)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


@pytest.mark.parametrize("locale", LOCALES)
def test_writer_and_samples_keep_the_bytes_of_keys(tmp_path, clean_env_factory, locale):
    out, result = write_and_read(tmp_path, clean_env_factory, locale)
    assert result["locale"].lower().replace("-", "") == locale.lower().replace("-", "")
    raw = os.fsdecode(b"raw-\xff\xfe")
    assert result["samples"] == [[k, k] for k in KEYS] + [[raw, "raw"]]
    names = []
    for path in sorted(out.glob("w-*.tar")):
        with tarfile.open(path, encoding="utf-8", errors="surrogateescape") as tf:
            names += tf.getnames()
    assert names == [f"{k}.{ext}" for k in KEYS for ext in ("cls", "txt")] + [raw + ".txt"]


def test_same_shards_in_every_locale(tmp_path, clean_env_factory):
    shards = []
    for locale in LOCALES:
        out, _ = write_and_read(tmp_path, clean_env_factory, locale)
        shards.append({p.name: p.read_bytes() for p in out.glob("w-*.tar")})
    assert len(shards[0]) == 3 and shards[0] == shards[1]
