# SPDX-License-Identifier: MIT
"""pipe:COMMAND shards: off unless allowed, run without a shell, exit status
checked, the command killed when the reader stops early."""
import os
import time

import pytest


def test_pipe_cat_equals_local(run, dataset):
    shards = dataset([4, 5])
    local = run(["ls", *shards])
    proc = run(["ls", "--allow-pipe", *[f"pipe:cat {p}" for p in shards]])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == local.stdout and proc.stdout.count("\n") == 9


def test_pipe_refused_without_allow_pipe(run, dataset):
    shard = dataset([2])[0]
    for args in (["ls"], ["bench"], ["cat"]):
        extra = ["000000.jpg"] if args == ["cat"] else []
        proc = run([*args, f"pipe:cat {shard}", *extra])
        assert proc.returncode == 1
        assert "pipe: URLs are disabled; set allow_pipe" in proc.stderr


@pytest.mark.parametrize("command, status", [("false", "exited with status 1"),
                                             ("sh -c 'exit 3'", "exited with status 3")])
def test_pipe_failure_names_command(run, command, status):
    proc = run(["ls", "--allow-pipe", f"pipe:{command}"])
    assert proc.returncode == 1
    assert f"pipe:{command}" in proc.stderr and status in proc.stderr, proc.stderr


def test_pipe_failure_after_whole_shard(run, dataset):
    """A command that wrote a whole shard and then failed is still an error."""
    shard = dataset([3])[0]
    proc = run(["ls", "--allow-pipe", f"pipe:sh -c 'cat \"$0\"; exit 4' {shard}"])
    assert proc.returncode == 1
    assert "exited with status 4" in proc.stderr, proc.stderr


def test_pipe_no_such_program(run):
    proc = run(["ls", "--allow-pipe", "pipe:no-such-program-xyz arg"])
    assert proc.returncode == 1
    assert "no-such-program-xyz" in proc.stderr


def test_pipe_no_shell(run, tmp_path, dataset):
    """Shell syntax is passed to the program as plain arguments."""
    shard = dataset([2])[0]
    marker = tmp_path / "pwned"
    proc = run(["ls", "--allow-pipe", f"pipe:cat {shard} ; touch {marker}"])
    assert proc.returncode == 1  # cat fails on the files ';' 'touch' ...
    assert not marker.exists()


def test_pipe_quoted_path(run, tmp_path, make_shard, samples_factory, expected_ls):
    d = tmp_path / "dir with 'quotes' and spaces"
    d.mkdir()
    samples = samples_factory(3)
    shard = make_shard(d / "s.tar", samples)
    proc = run(["ls", "--allow-pipe", f'pipe:cat "{shard}"'])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples)


def test_pipe_unterminated_quote(run):
    proc = run(["ls", "--allow-pipe", "pipe:cat 'x.tar"])
    assert proc.returncode == 1
    assert "unterminated" in proc.stderr


def test_pipe_killed_on_early_close(run, dataset):
    """cat stops after the first sample; the command (and what it started)
    is killed instead of being waited for."""
    shard = dataset([3])[0]
    t = time.monotonic()
    proc = run(["cat", "--allow-pipe", f"pipe:sh -c 'cat \"$0\"; sleep 30' {shard}",
                "000000.jpg"], text=False)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) > 0
    assert time.monotonic() - t < 15


PIPE_SECRETS = ("hunter2", "s3cr3tpass", "deadbeefsig", "tok3nvalue")


def test_pipe_secrets_never_shown(run, dataset, tmp_path):
    """Credentials on a pipe: command line (variables, --password=, header
    arguments, URLs with userinfo or a query, the word after --user) appear
    redacted in __url__, in messages and in the cache's files."""
    shard = dataset([3])[0]
    url = (f"pipe:env AWS_SECRET_ACCESS_KEY=hunter2 sh -c 'cat \"$0\"' {shard}"
           " --password=s3cr3tpass 'Authorization: Bearer tok3nvalue'"
           " http://u:s3cr3tpass@h/x?sig=deadbeefsig --user me:hunter2")
    shown = (f"pipe:env AWS_SECRET_ACCESS_KEY=*** sh -c 'cat \"$0\"' {shard}"
             " --password=*** \"Authorization: ***\" http://***@h/x?sig=*** --user ***")
    cache = tmp_path / "cache"
    for extra in ([], ["--cache-dir", str(cache), "--cache-size", "16M"]):
        proc = run(["ls", "--url", "--allow-pipe", *extra, url])
        assert proc.returncode == 0, proc.stderr
        assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == [shown] * 3
        for secret in PIPE_SECRETS:
            assert secret not in proc.stdout + proc.stderr
    for p in cache.iterdir():
        for secret in PIPE_SECRETS:
            assert secret.encode() not in p.read_bytes(), p
    failing = url.replace("sh -c", "sh -c 'exit 3' -c")
    for args in (["ls", "--allow-pipe"], ["ls"]):  # a failing command, and pipe: refused
        proc = run([*args, failing])
        assert proc.returncode == 1
        assert "AWS_SECRET_ACCESS_KEY=***" in proc.stderr, proc.stderr
        for secret in PIPE_SECRETS:
            assert secret not in proc.stdout + proc.stderr
    proc = run(["ls", "--allow-pipe", "pipe:cat --password=hunter2 'unterminated"])
    assert proc.returncode == 1 and "unterminated" in proc.stderr, proc.stderr
    assert "hunter2" not in proc.stderr


def _running(marker):
    """Processes whose command line holds marker (the test's own sleep)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("retries", [0, 1])
def test_pipe_stall_killed_within_limit(run, retries):
    """A command that neither writes nor exits is killed after io_timeout_ms
    of silence, run again io_retries times, then fails naming the command
    (redacted); no sleep is left behind."""
    marker = f"600.{os.getpid()}{retries}"  # GNU sleep takes fractions: a unique command line
    url = f"pipe:env API_TOKEN=hunter2 sleep {marker}"
    t = time.monotonic()
    proc = run(["ls", "--allow-pipe", "--io-timeout-ms", "2000", "--io-retries", str(retries),
                "--io-backoff-ms", "100", url], timeout=30)
    took = time.monotonic() - t
    assert proc.returncode == 1, proc.stderr
    assert f"pipe:env API_TOKEN=*** sleep {marker}: no output for 2.0 s (io_timeout_ms)" \
        in proc.stderr, proc.stderr
    assert f"the command was killed ({retries + 1} attempt" in proc.stderr, proc.stderr
    assert "hunter2" not in proc.stderr
    # (retries + 1) stall limits and the backoffs between them, plus start-up.
    assert 2.0 * (retries + 1) <= took < 2.0 * (retries + 1) + 6, took
    assert _running(marker) == []


def test_pipe_stall_then_rerun_delivers_every_byte_once(run, dataset, tmp_path):
    """The first run writes part of the shard and stalls; the second run is
    read from where the first stopped (its first bytes dropped), so the
    samples are those of the local shard, none lost or repeated."""
    shard = dataset([6])[0]
    flag = tmp_path / "ran-once"
    script = (f'if [ -e {flag} ]; then cat {shard}; '
              f'else touch {flag}; head -c 5000 {shard}; exec sleep 600; fi')
    local = run(["ls", shard])
    proc = run(["ls", "--allow-pipe", "--io-timeout-ms", "1500", "--io-retries", "1",
                "--io-backoff-ms", "50", f"pipe:sh -c '{script}'"], timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == local.stdout


def test_pipe_drip_fails_below_min_rate(run):
    """A command that writes a byte every 0.2 s never stalls, but brings far
    less than io_min_rate while the reader waits: too slow."""
    drip = "import sys,time\nwhile True:\n    sys.stdout.buffer.write(b'x'); sys.stdout.flush(); time.sleep(0.2)"
    t = time.monotonic()
    proc = run(["ls", "--allow-pipe", "--io-timeout-ms", "1000", "--io-min-rate", "4K",
                "--io-retries", "0", f'pipe:/usr/bin/python3 -c "{drip}"'], timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert "too slow:" in proc.stderr and "below io_min_rate 4096 bytes/s" in proc.stderr, \
        proc.stderr
    assert time.monotonic() - t < 10
