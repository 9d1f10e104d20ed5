"""`stoker index`: per-shard sample counts, and what a loader does with them."""
import json
import os

import pytest


def test_index_counts_every_shard(run, dataset, tmp_path):
    shards = [str(p) for p in dataset([10, 7, 13])]
    out = tmp_path / "index.json"
    proc = run(["index", "-o", str(out), *shards])
    assert proc.returncode == 0, proc.stderr
    assert "30 samples in 3 shards" in proc.stdout
    index = json.loads(out.read_text())
    assert index["format"] == "stoker-index" and index["version"] == 1
    assert index["samples"] == 30
    assert [(s["url"], s["samples"]) for s in index["shards"]] == list(zip(shards, [10, 7, 13]))


def test_index_counts_what_the_loader_delivers_under_skip(run, make_shard, samples_factory,
                                                          tmp_path):
    # A sample with the same extension twice is dropped by the loader under
    # --on-error skip: the index must count it out too.
    samples = samples_factory(5)
    path = make_shard(tmp_path / "dup.tar", samples, extra=[(7, "file", "000002.cls", b"9")])
    out = tmp_path / "index.json"
    failed = run(["index", "-o", str(out), path])
    assert failed.returncode == 1 and "000002" in failed.stderr and not out.exists()
    proc = run(["index", "--on-error", "skip", "-o", str(out), path])
    assert proc.returncode == 0, proc.stderr
    assert "1 bad samples" in proc.stdout
    ls = run(["ls", "--on-error", "skip", path])
    assert json.loads(out.read_text())["samples"] == ls.stdout.count("\n") == 4


def test_bench_with_index_shares_equally_and_resumes(bench_json, run, dataset, tmp_path):
    shards = [str(p) for p in dataset([10, 3, 17, 1, 12, 8])]  # 51 samples, uneven
    out = tmp_path / "index.json"
    assert run(["index", "-o", str(out), *shards]).returncode == 0
    for rank in range(3):
        r = bench_json(["--index", str(out), "--rank", str(rank), "--world-size", "3",
                        "--batch-size", "4", *shards])
        assert r["samples"] == 17  # floor(51 / 3) on every rank
    full = bench_json(["--index", str(out), "--batch-size", "4", "--shuffle-buffer", "8", *shards])
    part = bench_json(["--index", str(out), "--batch-size", "4", "--shuffle-buffer", "8",
                       "--start-batch", "10", *shards])
    assert full["samples"] == 51 and part["samples"] == 51 - 40
    # Reach 8: the resume starts reading at the oldest sample the shuffle
    # holds at output 40, at most 2 x 8 back (the epoch's first 40 are
    # not read again); the slots' read-ahead stays within what it holds.
    assert part["samples_read"] <= 51 - 40 + 2 * 8 < full["samples_read"]


@pytest.mark.parametrize("content, message", [
    ("not json", "not valid JSON"),
    ('{"format": "other", "shards": []}', "not a stoker dataset index"),
    ('{"format": "stoker-index", "version": 9, "shards": []}', "version 9 is not supported"),
    ('{"format": "stoker-index", "version": 1, "shards": [{"url": 3}]}', "needs a url"),
    ('{"format": "stoker-index", "version": 1, "shards": []}', "is not in the dataset index"),
])
def test_bad_index_is_a_clear_error(run, dataset, tmp_path, content, message):
    shards = [str(p) for p in dataset([3])]
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = run(["bench", "--index", str(bad), *shards])
    assert proc.returncode == 1
    assert message in proc.stderr and str(bad) in proc.stderr


def test_index_messages_never_show_credentials(run, tmp_path):
    """The index is read before any shard is: an index that lacks a shard,
    or holds one with a bad offset, names it redacted."""
    url = "http://user:s3cr3tpass@127.0.0.1:1/shard-0.tar?sig=deadbeef"
    bad = tmp_path / "bad.json"
    for shards in ([], [{"url": url, "samples": 2, "offsets": [512, 0]}]):
        bad.write_text(json.dumps({"format": "stoker-index", "version": 1, "shards": shards}))
        proc = run(["bench", "--index", str(bad), url])
        assert proc.returncode == 1
        assert "http://***@127.0.0.1:1/shard-0.tar?sig=***" in proc.stderr, proc.stderr
        assert "s3cr3tpass" not in proc.stderr and "deadbeef" not in proc.stderr


def test_missing_index_file(run, dataset, tmp_path):
    proc = run(["bench", "--index", str(tmp_path / "none.json"), *dataset([2])])
    assert proc.returncode == 1 and "none.json" in proc.stderr


def test_stale_index_is_detected_on_resume(bench_json, run, dataset, tmp_path):
    shards = [str(p) for p in dataset([6, 6])]
    out = tmp_path / "index.json"
    assert run(["index", "-o", str(out), *shards]).returncode == 0
    index = json.loads(out.read_text())
    index["shards"][0]["samples"] = 60  # claims more than the shard holds
    out.write_text(json.dumps(index))
    proc = run(["bench", "--index", str(out), *shards])
    assert proc.returncode == 1 and "offsets that do not match its samples" in proc.stderr
    del index["shards"][0]["offsets"]  # as for a compressed shard: found by reading
    out.write_text(json.dumps(index))
    proc = run(["bench", "--no-shuffle", "--shards-in-flight", "1", "--index", str(out),
                "--batch-size", "2", "--start-batch", "20", *shards])
    assert proc.returncode == 1
    assert "index is stale" in proc.stderr and shards[0] in proc.stderr


def test_offsets_locate_samples_and_compressed_shards_pass_over(bench_json, run, dataset,
                                                                tmp_path):
    import gzip
    plain = [str(p) for p in dataset([30, 30])]
    packed = []
    for p in plain:
        gz = p + ".gz"
        with open(p, "rb") as src, gzip.open(gz, "wb") as dst:
            dst.write(src.read())
        packed.append(gz)
    for shards, seekable in ((plain, True), (packed, False)):
        out = tmp_path / ("plain.json" if seekable else "packed.json")
        assert run(["index", "-o", str(out), *shards]).returncode == 0
        entries = json.loads(out.read_text())["shards"]
        assert all(("offsets" in e) == seekable for e in entries)
        if seekable:  # an offset is where a sample's first header starts
            data = open(shards[0], "rb").read()
            for k, o in enumerate(entries[0]["offsets"]):
                assert data[o:o + 6] == f"{k:06d}".encode(), (k, o)
        args = ["--batch-size", "4", "--shuffle-buffer", "8", "--shards-in-flight", "2", *shards]
        full = run(["bench", "--json", *args])
        part = bench_json(["--index", str(out), "--start-batch", "11", *args])
        assert full.returncode == 0 and part["samples"] == 60 - 44
        # Without offsets a resumed slot reads up to its sample; with them
        # it opens the shard right there.
        assert (part["samples_passed_over"] == 0) == seekable


def test_existing_index_is_refused_unless_forced(run, dataset, tmp_path):
    shards = [str(p) for p in dataset([4, 5])]
    out = tmp_path / "index.json"
    out.write_text("an older index")
    proc = run(["index", "-o", str(out), *shards])
    assert proc.returncode == 1 and str(out) in proc.stderr and "--force" in proc.stderr
    assert out.read_text() == "an older index"
    proc = run(["index", "--force", "-o", str(out), *shards])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["samples"] == 9
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("index")) == \
        ["index.json"]  # no temporary file left


def test_index_never_writes_through_a_planted_link(run, dataset, tmp_path):
    """The index used to be written to INDEX.tmp.PID with fopen(): a link
    planted there (for the pids to come) redirected it onto another file."""
    shards = [str(p) for p in dataset([3])]
    out = tmp_path / "index.json"
    victim = tmp_path / "victim"
    victim.write_text("precious")
    first_pid = os.getpid()
    for pid in range(first_pid, first_pid + 200):  # the CLI's pid is one of the next few
        (tmp_path / f"index.json.tmp.{pid}").symlink_to(victim)
    proc = run(["index", "-o", str(out), *shards])
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "precious"
    assert json.loads(out.read_text())["samples"] == 3
    out.unlink()
    out.symlink_to(victim)  # a link at the output name itself
    assert run(["index", "-o", str(out), *shards]).returncode == 1
    assert run(["index", "--force", "-o", str(out), *shards]).returncode == 0
    assert victim.read_text() == "precious" and not out.is_symlink()
