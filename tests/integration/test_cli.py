# SPDX-License-Identifier: MIT
"""The stoker command line: help, usage errors, URL patterns, bench."""
import os
import pty
import select

import pytest


# ---------------------------------------------------------------- help, usage

@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"], ["ls", "--help"], ["ls", "-h"],
                                  ["cat", "--help"], ["cat", "-h"], ["bench", "--help"],
                                  ["bench", "-h"]], ids=" ".join)
def test_help(run, args):
    proc = run(args)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout.lower()


def test_version(run):
    proc = run(["--version"])
    assert proc.returncode == 0
    assert proc.stdout.startswith("stoker ")


@pytest.mark.parametrize("args", [
    [],
    ["frobnicate"],
    ["ls"],
    ["ls", "--bogus", "x.tar"],
    ["ls", "--on-error", "maybe", "x.tar"],
    ["cat"],
    ["cat", "x.tar"],
    ["cat", "x.tar", "a.jpg", "extra"],
    ["cat", "x.tar", "nodot"],
    ["cat", "x.tar", ".jpg"],
    ["bench"],
    ["bench", "--bogus", "x.tar"],
    ["bench", "--on-error", "maybe", "x.tar"],
], ids=lambda a: " ".join(a) or "no-args")
def test_usage_error(run, args):
    proc = run(args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip(), "a usage error must say what is wrong"
    assert proc.stdout == ""


@pytest.mark.parametrize("option, value", [
    ("--threads", "0"), ("--threads", "abc"), ("--threads", "-1"), ("--threads", ""),
    ("--threads", "2x"), ("--threads", "99999999999999999999999"), ("--threads", "1025"),
    ("--batch-size", "0"), ("--shards-in-flight", "0"), ("--epochs", "0"),
    ("--samples-per-rank", "-1"), ("--world-size", "0"), ("--rank", "abc"), ("--seed", "-1"),
    ("--shuffle-buffer", "1.5"), ("--shards-in-flight", "x"), ("--size", "0"), ("--size", "y"),
    ("--shuffle-buffer-bytes", "abc"), ("--world-size", "-"), ("--batch-size", "1e3"),
])
def test_bad_number(run, tmp_path, option, value):
    """A number that does not parse is a usage error naming the option (and
    leaves the option unset: bench assigned the unparsed value before)."""
    proc = run(["bench", option, value, tmp_path / "x.tar"])
    assert proc.returncode == 2, proc.stderr
    assert option in proc.stderr


def test_rank_not_below_world_size(run, dataset):
    shards = dataset([2, 2, 2])
    proc = run(["bench", "--rank", "3", "--world-size", "3", *shards])
    assert proc.returncode in (1, 2), proc.stderr
    assert "rank" in proc.stderr


@pytest.mark.parametrize("command", ["ls", "bench", "cat"])
def test_missing_shard(run, dataset, tmp_path, command):
    good = dataset([3])[0]
    missing = tmp_path / "no-such-shard.tar"
    args = [missing, "000000.jpg"] if command == "cat" else [good, missing]
    proc = run([command, *args])
    assert proc.returncode == 1, proc.stderr
    assert str(missing) in proc.stderr


def test_cat_missing_member(run, dataset):
    shard = dataset([3])[0]
    proc = run(["cat", shard, "000001.png"])
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "000001.png" in proc.stderr


def test_directory_is_not_a_shard(run, tmp_path):
    proc = run(["ls", tmp_path])
    assert proc.returncode == 1
    assert str(tmp_path) in proc.stderr


# ------------------------------------------------------------- URL patterns

def ls_each(run, paths):
    out = []
    for p in paths:
        proc = run(["ls", p])
        assert proc.returncode == 0, proc.stderr
        out.append(proc.stdout)
    return "".join(out)


@pytest.mark.parametrize("name, pattern, order", [
    ("shard-{}.tar", "shard-{0..2}.tar", [0, 1, 2]),
    ("shard-{:03d}.tar", "shard-{000..002}.tar", [0, 1, 2]),
    ("shard-{}.tar", "shard-{2,0,1}.tar", [2, 0, 1]),
    ("shard-{}.tar", "shard-{2..0}.tar", [2, 1, 0]),
    ("s{}.tar", "s{0,{1..2}}.tar", [0, 1, 2]),
])
def test_brace_expansion(run, dataset, tmp_path, name, pattern, order):
    shards = dataset([3, 1, 4], name=name)
    proc = run(["ls", tmp_path / pattern])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ls_each(run, [shards[i] for i in order])
    assert proc.stdout.count("\n") == sum([3, 1, 4][i] for i in order)


def test_url_list_file(run, dataset, tmp_path):
    shards = dataset([2, 3, 1, 2], name="part-{}.tar")
    listing = tmp_path / "urls.txt"
    listing.write_text(f"# training shards\n\n{shards[3]}\n"
                       f"{tmp_path}/part-{{0..1}}.tar\n   \n# done\nfile://{shards[2]}\n")
    proc = run(["ls", f"@{listing}"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ls_each(run, [shards[3], shards[0], shards[1], shards[2]])


@pytest.mark.parametrize("pattern", ["shard{.tar", "shard}.tar", "shard{x}.tar", "shard{}.tar",
                                     "shard-{0..99999999}.tar"])
def test_bad_pattern(run, tmp_path, pattern):
    proc = run(["ls", tmp_path / pattern])
    assert proc.returncode == 1, proc.stderr
    assert pattern in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("content", ["", "# only a comment\n\n", "@other.txt\n"],
                         ids=["empty", "comments", "nested"])
def test_bad_url_list_file(run, tmp_path, content):
    listing = tmp_path / "urls.txt"
    listing.write_text(content)
    proc = run(["ls", f"@{listing}"])
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip()


def test_url_list_file_missing(run, tmp_path):
    missing = tmp_path / "nolist.txt"
    proc = run(["ls", f"@{missing}"])
    assert proc.returncode == 1
    assert str(missing) in proc.stderr


def test_empty_tar_has_no_samples(run, make_shard, summary, tmp_path):
    proc = run(["ls", make_shard(tmp_path / "empty.tar", [])])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert summary(proc.stderr)["samples"] == 0


def test_same_key_in_two_shards(run, make_shard, samples_factory, expected_ls, tmp_path):
    samples = samples_factory(2)
    a = make_shard(tmp_path / "a.tar", samples)
    proc = run(["ls", a, a])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples) * 2


def test_ls_url_column(run, dataset, tmp_path):
    shards = dataset([2, 1])
    proc = run(["ls", "--url", tmp_path / "shard-{0..1}.tar"])
    assert proc.returncode == 0, proc.stderr
    want = "".join(f"{p}\t{line}\n" for p in shards for line in ls_each(run, [p]).splitlines())
    assert proc.stdout == want


# ------------------------------------------------------------------- bench

def test_bench_json(bench_json, dataset):
    shards = dataset([10, 7, 13])
    result = bench_json(["--batch-size", "4", *shards])
    assert result["samples"] == 30
    assert result["shards"] == 3
    assert result["batches"] == 8  # ceil(30 / 4), the last batch short
    assert result["samples_per_s"] > 0
    assert result["samples_skipped"] == 0


def test_bench_text_report(run, dataset):
    proc = run(["bench", *dataset([5, 6])])
    assert proc.returncode == 0, proc.stderr
    assert "samples           11 in" in proc.stdout


def test_bench_epochs(bench_json, dataset):
    result = bench_json(["--epochs", "3", *dataset([4, 9])])
    assert result["samples"] == 39


@pytest.mark.parametrize("shuffle", [[], ["--no-shuffle"], ["--seed", "7", "--shuffle-buffer", "5"]],
                         ids=["shuffle", "no-shuffle", "seed7-buf5"])
@pytest.mark.parametrize("threads", [1, 2, 8])
def test_bench_threads_same_count(bench_json, dataset, threads, shuffle):
    shards = dataset([9, 1, 14, 6, 20])
    result = bench_json(["--threads", str(threads), "--shards-in-flight", "3",
                              "--batch-size", "5", *shuffle, *shards])
    assert result["samples"] == 50
    assert result["batches"] == 10


SEVEN = [3, 5, 7, 11, 13, 17, 19]


def shard_subset_sums(sizes, k):
    """All sums of k distinct shards."""
    sums = {0: {0}}
    for n in range(1, k + 1):
        sums[n] = set()
    for size in sizes:
        for n in range(k, 0, -1):
            sums[n] |= {s + size for s in sums[n - 1]}
    return sums[k]


@pytest.mark.parametrize("order", [["--no-shuffle"], ["--seed", "0"], ["--seed", "12345"]],
                         ids=["no-shuffle", "seed0", "seed12345"])
def test_ranks_partition_the_shards(bench_json, dataset, order):
    shards = dataset(SEVEN)
    per_rank = [bench_json(["--rank", str(r), "--world-size", "3", *order, *shards])
                for r in range(3)]
    counts = [r["samples"] for r in per_rank]
    assert sum(counts) == sum(SEVEN), counts
    for rank, count in enumerate(counts):
        n_shards = 7 // 3 + (rank < 7 % 3)
        assert count in shard_subset_sums(SEVEN, n_shards), (rank, counts)


def test_rank_from_environment(bench_json, dataset):
    shards = dataset(SEVEN)
    for rank in range(3):
        by_option = bench_json(["--rank", str(rank), "--world-size", "3", *shards])
        by_env = bench_json(shards, env={"RANK": str(rank), "WORLD_SIZE": "3"})
        assert by_env["samples"] == by_option["samples"]


@pytest.mark.parametrize("order", [[], ["--no-shuffle"]], ids=["shuffle", "no-shuffle"])
@pytest.mark.parametrize("n", [1, 4, 10, 25, 73, 200])
def test_samples_per_rank_exact(bench_json, dataset, n, order):
    shards = dataset([5, 17, 3, 40, 8])
    for rank in range(3):
        result = bench_json(["--samples-per-rank", str(n), "--rank", str(rank),
                                  "--world-size", "3", "--batch-size", "7", *order, *shards])
        assert result["samples"] == n, (rank, result)
        assert result["batches"] == -(-n // 7), (rank, result)


def test_samples_per_rank_epochs(bench_json, dataset):
    shards = dataset([5, 17, 3, 40, 8])
    result = bench_json(["--samples-per-rank", "30", "--epochs", "2", "--rank", "2",
                              "--world-size", "3", *shards])
    assert result["samples"] == 60


def test_samples_per_rank_with_empty_shards(run, dataset):
    """A rank whose shards hold no sample can never yield N samples: it
    must fail, not loop forever."""
    shards = dataset([0, 5, 0])
    proc = run(["bench", "--no-shuffle", "--samples-per-rank", "4", "--rank", "0",
                "--world-size", "3", *shards])
    assert proc.returncode == 1, proc.stderr
    assert "rank 0" in proc.stderr


def test_too_few_shards_for_world(run, dataset):
    shards = dataset([4, 4])
    proc = run(["bench", "--rank", "0", "--world-size", "3", *shards])
    assert proc.returncode == 1, proc.stderr
    assert "2 shard" in proc.stderr and "3 ranks" in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_no_progress_when_stderr_is_not_a_terminal(run, dataset):
    proc = run(["bench", *dataset([30, 30])])
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr
    assert "\x1b[" not in proc.stderr


def test_progress_when_stderr_is_a_terminal(run, dataset):
    """Control for the test above: on a terminal the progress line is drawn."""
    master, slave = pty.openpty()
    try:
        proc = run(["bench", *dataset([30, 30])], stderr=slave)
        os.close(slave)
        slave = None
        chunks = []
        while select.select([master], [], [], 1)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal has no writer left
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    tty_err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, tty_err
    assert "\r" in tty_err
    assert "samples/s" in tty_err
