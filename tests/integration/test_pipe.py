"""pipe:COMMAND shards: off unless allowed, run without a shell, exit status
checked, the command killed when the reader stops early."""
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
