# SPDX-License-Identifier: MIT
"""`stoker index` of local shards reads their tar headers and seeks over
member data; the index it writes is the one a full read writes (the
streamed count of a pipe: source, as a remote shard is counted)."""
import json
import os

import pytest

from test_bombs import gnu_header, sparse_bomb

MiB = 1 << 20


def rchar():
    """Bytes this process and its reaped children have read by read(2)
    and kin (Linux accounts a waited-for child's I/O to its parent)."""
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def holey_shard(path, members, member_bytes):
    """A shard of `members` samples of one member_bytes .bin each, whose
    data is never written: file-system holes that read as zeros, so the
    file is as large as its tar says while using a few KB of disk."""
    with open(path, "wb") as f:
        for i in range(members):
            f.write(gnu_header(b"%06d.bin" % i, member_bytes, b"0"))
            f.seek(-(-member_bytes // 512) * 512, os.SEEK_CUR)
        f.write(b"\0" * 1024)
    return path


def test_index_seeks_over_member_data(run, tmp_path):
    """256 MiB of member data in 32 samples: the scan reads the headers
    (one 4 KiB read each), a streamed count reads every byte."""
    shard = holey_shard(tmp_path / "big.tar", 32, 8 * MiB)
    assert shard.stat().st_size > 256 * MiB
    before = rchar()
    proc = run(["index", "-o", tmp_path / "local.json", shard])
    local_read = rchar() - before
    assert proc.returncode == 0, proc.stderr
    assert "32 samples in 1 shards" in proc.stdout
    before = rchar()
    proc = run(["index", "--allow-pipe", "-o", tmp_path / "streamed.json", f"pipe:cat {shard}"])
    streamed_read = rchar() - before
    assert proc.returncode == 0, proc.stderr
    assert streamed_read > 256 * MiB, streamed_read
    # The binary and its libraries' headers are read too (more under ASan).
    assert local_read < 4 * MiB, local_read


def index_without_stamps(path):
    """(url-free) counts and offsets of each shard of an index file."""
    return [(s["samples"], s.get("offsets")) for s in json.loads(path.read_text())["shards"]]


def flavours(tmp_path, make_shard, samples_factory, gnu_tar):
    """Shards whose count depends on more than their headers being there:
    long names and pax records, members to ignore, bad samples of every
    kind under skip, a shard cut short, one with data after its end."""
    samples = samples_factory(12, size=lambda i, j: 300 + 4099 * i + j)
    out = {}
    out["pax"] = make_shard(tmp_path / "pax.tar", samples,
                            extra=[(3, "dir", "d/", None), (5, "file", "README", b"x" * 700)],
                            pax_headers={"000004.jpg": {"comment": "c" * 3000}})
    out["gnu-long-names"] = gnu_tar(tmp_path / "gnu.tar",
                                    samples_factory(5, prefix="k" * 150 + "/"), "gnu")
    out["duplicate-member"] = make_shard(tmp_path / "dup.tar", samples,
                                         extra=[(7, "file", "000002.cls", b"9")])
    out["reappearing-key"] = make_shard(
        tmp_path / "again.tar", samples[:3] + samples_factory(1, start=9) + samples[3:6]
        + samples_factory(1, start=9))
    out["sparse"] = sparse_bomb(tmp_path, "sparse.tar", 3, 50 * MiB, "pax")
    out["realsize-claim"] = make_shard(
        tmp_path / "claim.tar", samples[:4],
        pax_headers={"000001.jpg": {"GNU.sparse.size": str(MiB)}})
    whole = make_shard(tmp_path / "whole.tar", samples).read_bytes()
    out["cut-short"] = tmp_path / "cut.tar"
    out["cut-short"].write_bytes(whole[:len(whole) // 2 + 100])
    out["data-after-end"] = tmp_path / "after.tar"
    second = make_shard(tmp_path / "x.tar", samples[:1]).read_bytes()
    out["data-after-end"].write_bytes(whole + second)
    return out


@pytest.mark.parametrize("options", [(), ("--max-member-bytes", "20000")],
                         ids=["defaults", "member-limit"])
def test_scanned_index_equals_the_streamed_one(run, tmp_path, make_shard, samples_factory,
                                               gnu_tar, options):
    """Every flavour counts and locates the same samples whether its data
    was read (pipe:cat) or seeked over (a path), under skip; under fail
    both refuse the same shards."""
    for name, shard in flavours(tmp_path, make_shard, samples_factory, gnu_tar).items():
        for policy in ("skip", "fail"):
            local, streamed = tmp_path / f"{name}-l.json", tmp_path / f"{name}-s.json"
            a = run(["index", "--on-error", policy, *options, "-o", local, shard])
            b = run(["index", "--allow-pipe", "--on-error", policy, *options, "-o", streamed,
                     f"pipe:cat {shard}"])
            assert a.returncode == b.returncode, (name, policy, a.stderr, b.stderr)
            if a.returncode == 0:
                assert (a.stdout.replace(str(local), "") ==
                        b.stdout.replace(str(streamed), "")), (name, policy)
                assert index_without_stamps(local) == index_without_stamps(streamed), name
