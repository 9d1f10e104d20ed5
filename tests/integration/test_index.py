# SPDX-License-Identifier: MIT
"""`stoker index`: per-shard sample counts, and what a loader does with them."""
import json
import os
import stat

import pytest

from conftest import write_shard
from servers import Nginx


def test_index_counts_every_shard(run, dataset, tmp_path):
    shards = [str(p) for p in dataset([10, 7, 13])]
    out = tmp_path / "index.json"
    proc = run(["index", "-o", str(out), *shards])
    assert proc.returncode == 0, proc.stderr
    assert "30 samples in 3 shards" in proc.stdout
    index = json.loads(out.read_text())
    assert index["format"] == "stoker-index" and index["version"] == 3
    assert index["samples"] == 30
    assert [(s["url"], s["samples"]) for s in index["shards"]] == list(zip(shards, [10, 7, 13]))
    # Each shard's stamp: its size and modification time in ns, exactly.
    for entry, shard in zip(index["shards"], shards):
        st = os.stat(shard)
        assert (entry["size"], entry["mtime_ns"]) == (st.st_size, st.st_mtime_ns)
        assert "etag" not in entry


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


V2 = '{"format": "stoker-index", "version": 2, '


@pytest.mark.parametrize("content, message", ids=lambda v: v[:40], argvalues=[
    ("not json", "the dataset index is not valid JSON (lexical error"),
    ('{"format": "other", "shards": []}', "not a stoker dataset index"),
    ('{"format": "stoker-index", "version": 9, "shards": []}',
     "version 9 is not supported (2 to 3 are): run `stoker index` again"),
    ('{"format": "stoker-index", "version": 1, "shards": []}',
     "written by an older stoker (version 1, which records no shard sizes to check it "
     "against): run `stoker index` again"),
    (V2 + '"shards": [{"samples": 3}]}', "shard entry 0 needs a url and a sample count"),
    (V2 + '"shards": [{"url": 3}]}', 'a number as the value of "url"'),
    (V2 + '"shards": []}', "is not in the dataset index"),
    (V2 + '"shards": [], "comment": "x"}',
     'unknown key "comment" (an index holds format, version, samples, url_key, shards) (byte 64 '
     'of the dataset index)'),
    (V2 + '"shards": [{"url": "a", "url_tag": "00112233445566778899aabbccddeeff", "samples": 1}]}',
     "shard 0 of the dataset index has a url_tag, but the index has no url_key"),
    (V2 + '"url_key": "0011", "shards": []}', "a url_key that is not 32 lower-case hex digits"),
    (V2 + '"shards": [{"url": "a", "samples": 1.5}]}',
     "1.5 where a count or offset (an unsigned integer) goes"),
    (V2 + '"shards": [{"url": "a", "samples": -1}]}', "-1 where a count or offset"),
    (V2 + '"shards": [{"url": "a", "samples": true}]}', 'a boolean as the value of "samples"'),
    (V2 + '"samples": 5, "shards": [{"url": "a", "samples": 3}]}',
     "counts 5 samples in all, but its shards add up to 3"),
    (V2 + '"shards": [{"url": "a", "samples": 2, "size": 4096, "offsets": [0, 100]}]}',
     "shard a has a bad offset (number 1, 100)"),
    (V2 + '"shards": [{"url": "a", "samples": 2, "size": 1024, "offsets": [0, 1024]}]}',
     "shard a has a bad offset (number 1, 1024)"),
    (V2 + '"shards": [{"url": "a", "samples": 1, "offsets": [0, 512]}]}',
     "shard a has more offsets than its 1 samples"),
    (V2 + '"shards": [{"url": "a", "offsets": [], "samples": 0}]}',
     "offsets before the shard's sample count"),
    (V2 + '"shards": [{"url": "a", "samples": 2, "offsets": [0]}]}',
     "shard a has offsets that do not match its samples"),
    (V2 + '"shards": [{"url": "a", "url": "b", "samples": 1}]}', 'key "url" twice'),
    ('[' * 100000, "not a stoker dataset index: its top level is a list, not an object"),
    (V2 + '"shards": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}',
     "a list nested too deep (an index nests four levels"),
    (V2 + '"shards": [{"url": "a", "samples": 1, "offsets": [[[[[[[[[[]]]]]]]]]]}]}',
     "a list nested too deep"),
])
def test_bad_index_is_a_clear_error(run, dataset, tmp_path, content, message):
    """Each index error has an index's wording (never tar's "not a readable
    tar shard"), the file's name, and one error code (STK_EINDEX)."""
    shards = [str(p) for p in dataset([3])]
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = run(["bench", "--index", str(bad), *shards])
    assert proc.returncode == 1
    assert message in proc.stderr and str(bad) in proc.stderr, proc.stderr
    assert "tar shard" not in proc.stderr


def test_index_messages_never_show_credentials(run, tmp_path):
    """The index is read before any shard is: an index that lacks a shard,
    or holds one with a bad offset, names it redacted."""
    url = "http://user:s3cr3tpass@127.0.0.1:1/shard-0.tar?sig=deadbeef"
    bad = tmp_path / "bad.json"
    for shards in ([], [{"url": url, "samples": 2, "offsets": [512, 0]}]):
        bad.write_text(json.dumps({"format": "stoker-index", "version": 2, "shards": shards}))
        proc = run(["bench", "--index", str(bad), url])
        assert proc.returncode == 1
        assert "http://***@127.0.0.1:1/shard-0.tar?sig=***" in proc.stderr, proc.stderr
        assert "s3cr3tpass" not in proc.stderr and "deadbeef" not in proc.stderr


SECRETS = ("pa55word", "deadbeefsecret", "AKIDSECRETKEY", "t0ken")


def secret_url(port, name, signature="deadbeefsecret"):
    """A presigned-looking URL with a password as well: nginx ignores both."""
    return (f"http://user:pa55word@127.0.0.1:{port}/{name}?X-Amz-Credential=AKIDSECRETKEY"
            f"&X-Amz-Signature={signature}&token=t0ken")


def test_index_of_urls_with_credentials_keeps_none_of_them(run, bench_json, dataset, tmp_path):
    """The index stored every URL as given, 0644: a presigned query, a
    token and a password were there for any user of the host to read. It
    holds them redacted, is not readable by others, and still serves the
    same URLs; a URL with another secret is another URL."""
    shards = dataset([5, 7, 9])
    with Nginx(shards[0].parent, tmp_path / "nginx") as server:
        urls = [secret_url(server.port, p.name) for p in shards]
        out = tmp_path / "index.json"
        proc = run(["index", "-o", out, *urls])
        assert proc.returncode == 0, proc.stderr
        text = out.read_text()
        assert not [s for s in SECRETS if s in text], text
        assert stat.S_IMODE(out.stat().st_mode) & 0o077 == 0, oct(out.stat().st_mode)
        assert json.loads(text)["shards"][0]["url"] == \
            f"http://***@127.0.0.1:{server.port}/shard-0.tar?X-Amz-Credential=***" \
            "&X-Amz-Signature=***&token=***"
        # The same URLs load it: equal shares need every count (21 / 3).
        for rank in range(3):
            report = bench_json(["--index", out, "--rank", rank, "--world-size", "3",
                                 "--batch-size", "2", *urls])
            assert report["samples"] == 7, report
        resigned = [secret_url(server.port, p.name, "0therSignature") for p in shards]
        proc = run(["bench", "--index", out, *resigned])
        assert proc.returncode == 1 and "is not in the dataset index" in proc.stderr, proc.stderr
        assert "0therSignature" not in proc.stderr and "pa55word" not in proc.stderr
        # An index of version 2 holds the URLs as given: still read, and matched alike.
        old = json.loads(text)
        old["version"] = 2
        del old["url_key"]
        for entry, url in zip(old["shards"], urls):
            entry["url"] = url
            del entry["url_tag"]
        out.write_text(json.dumps(old))
        report = bench_json(["--index", out, "--rank", 1, "--world-size", "3", *urls])
        assert report["samples"] == 7, report


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_index_that_is_no_regular_file_is_refused_at_once(run, dataset, tmp_path, kind):
    """A FIFO given as the index blocked the loader in open() until some
    writer came (forever); a directory or a device is no index either."""
    shards = dataset([3])
    path = tmp_path / "index.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    proc = run(["bench", "--index", path, *shards], timeout=30)
    assert proc.returncode == 1
    what = {"fifo": "a FIFO", "directory": "a directory", "device": "a device or socket"}[kind]
    assert f"{path}: the dataset index is not a regular file ({what})" in proc.stderr, \
        proc.stderr


def test_relative_names_indexed_elsewhere_serve_the_loader(run, dataset, tmp_path):
    """`cd shards && stoker index -o /elsewhere/index.json *.tar`: the names
    are written relative to the index's directory (a loader reads them from
    there), so a loader given the shards by absolute or relative paths finds
    them; an index beside its shards keeps the names as given (issue 35)."""
    shards = dataset([6, 5])
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "elsewhere" / "index.json"
    names = [os.path.basename(str(s)) for s in shards]
    proc = run(["index", "-o", str(out), *names], cwd=os.path.dirname(str(shards[0])))
    assert proc.returncode == 0, proc.stderr
    rel = os.path.relpath(os.path.dirname(str(shards[0])), out.parent)
    assert [e["url"] for e in json.loads(out.read_text())["shards"]] == \
        [os.path.join(rel, n) for n in names]
    proc = run(["bench", "--json", "--index", str(out), *map(str, shards)])
    assert proc.returncode == 0, proc.stderr
    beside = os.path.join(os.path.dirname(str(shards[0])), "index.json")
    proc = run(["index", "-o", beside, *names], cwd=os.path.dirname(str(shards[0])))
    assert proc.returncode == 0, proc.stderr
    assert [e["url"] for e in json.loads(open(beside).read())["shards"]] == names


def test_an_index_whose_shards_are_not_found_says_so(run, dataset, tmp_path):
    """An index moved away from the shards its relative names point to:
    the message says what the names resolve to and that it is not found,
    not only "not in the dataset index"."""
    shards = dataset([4, 3])
    beside = os.path.join(os.path.dirname(str(shards[0])), "index.json")
    names = [os.path.basename(str(s)) for s in shards]
    proc = run(["index", "-o", beside, *names], cwd=os.path.dirname(str(shards[0])))
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "away").mkdir()
    moved = tmp_path / "away" / "moved.json"
    moved.write_bytes(open(beside, "rb").read())
    proc = run(["bench", "--index", str(moved), *map(str, shards)])
    assert proc.returncode == 1
    assert f"{tmp_path}/away/{names[0]}: not found" in proc.stderr, proc.stderr
    assert "2 of the index's shards name no file" in proc.stderr, proc.stderr


def test_missing_index_file(run, dataset, tmp_path):
    proc = run(["bench", "--index", str(tmp_path / "none.json"), *dataset([2])])
    assert proc.returncode == 1 and "none.json" in proc.stderr


def test_stale_index_is_detected_on_resume(bench_json, run, dataset, tmp_path):
    shards = [str(p) for p in dataset([6, 6])]
    out = tmp_path / "index.json"
    assert run(["index", "-o", str(out), *shards]).returncode == 0
    index = json.loads(out.read_text())
    index["shards"][0]["samples"] = 60  # claims more than the shard holds
    index["samples"] = 66
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


def test_an_output_that_cannot_be_made_fails_before_any_shard_is_read(run, tmp_path):
    """`stoker index -o` into a directory that cannot hold it read every
    shard (for remote ones a download of the dataset) before it said so."""
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "index.json"
    proc = run(["index", "-o", out, tmp_path / "no-such-shard.tar"])
    assert proc.returncode == 1
    assert f"{out}: cannot open its directory: Not a directory" in proc.stderr, proc.stderr
    assert "no-such-shard" not in proc.stderr


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


# ---------------------------------------------- an index checked against its shards

STALE = "the index is stale for {}: run `stoker index` again"


def rewrite_keeping_stamp(path, samples):
    """Rewrite the shard at path with other samples but the same size
    (zeros after the archive's end, which readers accept) and the same
    modification time: only reading it tells it changed."""
    st = os.stat(path)
    write_shard(path, samples)
    assert os.path.getsize(path) <= st.st_size
    with open(path, "r+b") as f:
        f.truncate(st.st_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_rewritten_shard_is_refused_when_the_index_is_loaded(run, dataset, samples_factory,
                                                             tmp_path):
    """A shard rewritten from 50 to 20 samples after `stoker index`: its
    size and time differ from the index's, found by one stat at load."""
    shards = [str(p) for p in dataset([50, 50])]
    out = tmp_path / "index.json"
    assert run(["index", "-o", str(out), *shards]).returncode == 0
    write_shard(shards[0], samples_factory(20))
    size = os.path.getsize(shards[0])
    for args in (["bench"], ["bench", "--rank", "0", "--world-size", "2"]):
        proc = run([*args, "--index", str(out), *shards])
        assert proc.returncode == 1
        assert STALE.format(shards[0]) in proc.stderr, proc.stderr
        assert f"the shard has {size} bytes" in proc.stderr
    # Touched but not rewritten: the time alone says it may have changed.
    assert run(["index", "--force", "-o", str(out), *shards]).returncode == 0
    os.utime(shards[1], ns=(0, 1_000_000_000))
    proc = run(["bench", "--index", str(out), *shards])
    assert proc.returncode == 1 and STALE.format(shards[1]) in proc.stderr, proc.stderr
    assert "the shard was modified at 1.000000000" in proc.stderr


@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_rewritten_shard_with_the_same_stamp_fails_at_its_end(run, dataset, samples_factory,
                                                              tmp_path, on_error):
    """Same size and time, 20 samples instead of 50: the count is checked
    when the shard ends, on 1 and 2 ranks and under either policy (a stale
    index is never skipped as bad input). Before, one rank's 100 samples
    held 30 repeats, without a word."""
    shards = [str(p) for p in dataset([50, 50])]
    out = tmp_path / "index.json"
    assert run(["index", "-o", str(out), *shards]).returncode == 0
    rewrite_keeping_stamp(shards[0], samples_factory(20, prefix="new-"))
    for ranks in (["--world-size", "1"], ["--rank", "1", "--world-size", "2"]):  # rank 1 reads it
        proc = run(["bench", "--on-error", on_error, "--index", str(out), *ranks, *shards])
        assert proc.returncode == 1, proc.stdout
        # A shuffled epoch with an index opens each sample at its offset (a
        # global order): the reader then says where it started, not a count.
        assert STALE.format(shards[0]) + " (it counts 50 samples" in proc.stderr, proc.stderr
        assert ("the shard holds 20)" in proc.stderr or
                "the shard ended after" in proc.stderr), proc.stderr


def test_a_count_of_10_15_is_refused(run, dataset, tmp_path):
    """A count of 10^15 (offsets left out, as for a compressed shard) made
    endless epochs on 2 ranks and a wrong len(): no reader gets past
    max_samples_per_shard, so no index may count more. A count below it
    that is still wrong is found at the shard's end."""
    shards = [str(p) for p in dataset([50, 50])]
    out = tmp_path / "index.json"
    assert run(["index", "-o", str(out), *shards]).returncode == 0
    index = json.loads(out.read_text())
    del index["shards"][0]["offsets"]
    for count in (10 ** 15, 1000):
        index["shards"][0]["samples"] = count
        index["samples"] = count + 50
        out.write_text(json.dumps(index))
        # Both ranks refuse 10^15 when loading; 1000 fails the rank that reads the shard.
        for rank in ("0", "1") if count > 10000 else ("1",):
            proc = run(["bench", "--index", str(out), "--rank", rank, "--world-size", "2",
                        "--max-samples-per-shard", "10000", *shards], timeout=30)
            assert proc.returncode == 1
            if count > 10000:
                assert (f"shard {shards[0]} counts 1000000000000000 samples in the dataset "
                        "index, more than max_samples_per_shard (10000)") in proc.stderr, \
                    proc.stderr
            else:
                assert STALE.format(shards[0]) + " (it counts 1000 samples, the shard holds 50)" \
                    in proc.stderr, proc.stderr


def test_offsets_shifted_by_one_sample_are_found(run, bench_json, dataset, tmp_path):
    """Offsets shifted by one sample (shard unchanged): a resume opened the
    shard one sample late and delivered other batches; the count from there
    to the shard's end gives it away."""
    shards = [str(p) for p in dataset([30, 30])]
    out = tmp_path / "index.json"
    assert run(["index", "-o", str(out), *shards]).returncode == 0
    args = ["--no-shuffle", "--shards-in-flight", "1", "--batch-size", "2", "--start-batch", "5",
            *shards]
    assert bench_json(["--index", str(out), *args])["samples"] == 60 - 10
    index = json.loads(out.read_text())
    offsets = index["shards"][0]["offsets"]
    index["shards"][0]["offsets"] = offsets[1:] + [offsets[-1] + 512]
    out.write_text(json.dumps(index))
    proc = run(["bench", "--index", str(out), *args])
    assert proc.returncode == 1
    assert STALE.format(shards[0]) + " (it counts 30 samples; read from the offset it records " \
        "for sample 10, the shard ended after 19)" in proc.stderr, proc.stderr


def big_index(path, head, filler, count, tail):
    with open(path, "wb") as f:
        f.write(head)
        chunk = filler * 1_000_000
        for _ in range(count // 1_000_000):
            f.write(chunk)
        f.write(tail)


@pytest.mark.parametrize("what", ["unknown key", "offsets"])
def test_100mb_index_is_refused_quickly_in_bounded_memory(run_measured, dataset, tmp_path, what):
    """A 100 MB index holding 50 million zeros, under an unknown key or as
    the offsets of a 3-sample shard, took 4.0 GB and 30 s to load: it is
    refused at the first value an index cannot hold, read as a stream."""
    shard = str(dataset([3])[0])
    path = tmp_path / "big.json"
    head = b'{"format": "stoker-index", "version": 2, "samples": 3, '
    if what == "unknown key":
        head += b'"junk": ['
        message = 'unknown key "junk"'
    else:
        head += b'"shards": [{"url": "' + shard.encode() + b'", "samples": 3, "offsets": ['
        message = f"shard {shard} has a bad offset (number 1, 0)"
    big_index(path, head, b"0,", 50_000_000, b"0]}]}")
    assert path.stat().st_size > 100_000_000
    result = run_measured(["bench", "--index", str(path), shard])
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert result.cpu_s < 5, result.cpu_s
    assert result.peak_mib < 64, result.peak_mib
