# SPDX-License-Identifier: MIT
"""One error model: every failure stoker raises derives from stoker.Error and
carries .code (the C library's STK_E* code), and is still caught by the
builtin class it stood for before (ValueError, FileNotFoundError, OSError);
a wrong option value names the option and what it accepts."""
import os
import sys

import pytest

import stoker

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from servers import FaultServer  # noqa: E402  (the integration tests' HTTP server)

STK_EINVAL, STK_ENOENT, STK_EBUSY, STK_EHTTP, STK_EINDEX, STK_EACCESS = -22, -2, -1006, -1011, -1013, -1014
DATA_CODES = {-1001, -1002, -1003, -1004, -1008, -1009, -1012}


def eval_loader(urls, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("image_size", 16)
    kw.setdefault("threads", 1)
    return stoker.Loader(urls, transform="eval", shuffle=False, rank=0, world_size=1, **kw)


def caught(make, builtin):
    """The stoker.Error that make() raises; also caught as builtin."""
    with pytest.raises(builtin):
        make()
    try:
        make()
    except stoker.Error as e:
        assert isinstance(e.code, int) and e.code < 0, e.code
        assert str(e), "a stoker error always says what went wrong"
        return e
    pytest.fail("no stoker.Error raised")


def test_bad_option(even_shards):
    e = caught(lambda: eval_loader(even_shards, layout="NHWC"), ValueError)
    assert isinstance(e, stoker.OptionError) and e.code == STK_EINVAL
    assert "layout" in str(e) and "nchw,nhwc" in str(e), str(e)
    e = caught(lambda: eval_loader(even_shards, samples_per_rank=1500.0), TypeError)
    assert isinstance(e, stoker.OptionTypeError) and e.code == STK_EINVAL
    assert "samples_per_rank" in str(e) and "between 1 and" in str(e) and "1500.0" in str(e)
    e = caught(lambda: eval_loader(even_shards, shuffel=False), TypeError)
    assert "shuffel" in str(e)
    e = caught(lambda: eval_loader(even_shards, threads=5000), ValueError)
    assert "threads must be between 1 and 1024" in str(e)
    e = caught(lambda: stoker.Loader(even_shards, transform="center"), ValueError)
    assert "transform" in str(e) and "'train', 'eval' or None" in str(e)


def test_missing_shard(even_shards, tmp_path):
    missing = str(tmp_path / "no-such-000000.tar")
    e = caught(lambda: eval_loader(even_shards[:1] + [missing]), FileNotFoundError)
    assert isinstance(e, stoker.NotFound) and e.code == STK_ENOENT and missing in str(e)


def test_http_403(even_shards):
    name = os.path.basename(even_shards[0])
    with open(even_shards[0], "rb") as f:
        files = {name: f.read()}
    with FaultServer(files) as server:
        def run():
            loader = eval_loader([server.url("403", name)], io_retries=0, io_backoff_ms=1)
            next(iter(loader))
        e = caught(run, OSError)
    assert isinstance(e, stoker.HTTPError) and e.code == STK_EACCESS
    assert "403" in str(e) and name in str(e), str(e)


def served(paths):
    """{name: bytes} of the shards, for a FaultServer."""
    files = {}
    for path in paths:
        with open(path, "rb") as f:
            files[os.path.basename(path)] = f.read()
    return files


class Expiring(FaultServer):
    """Serves like FaultServer until .expired is set, then refuses every
    request with 401, as an object store does once a token has expired."""
    expired = False

    def handle(self, h):
        if self.expired:
            return self.status(h, 401, "Unauthorized")
        return super().handle(h)


def test_expired_credentials_fail_the_epoch_under_skip(even_shards):
    """A credential that stops working mid-epoch is not bad data: under
    on_error="skip" the epoch fails with the status and the shard's URL, and
    so does the next one, instead of skipping every later shard and
    returning empty epochs with no error (issue 39)."""
    files = served(even_shards[:4])
    with Expiring(files) as server:
        urls = [server.url("ok", name) for name in files]
        loader = eval_loader(urls, on_error="skip", shards_in_flight=1, io_retries=0,
                             io_backoff_ms=1)
        batches = 0
        with pytest.raises(stoker.HTTPError) as raised:
            for _ in loader:
                batches += 1
                server.expired = True
        assert batches >= 1 and raised.value.code == STK_EACCESS
        assert "HTTP 401" in str(raised.value) and "127.0.0.1" in str(raised.value)
        loader.set_epoch(1)
        with pytest.raises(stoker.HTTPError) as raised:
            list(loader)
        assert raised.value.code == STK_EACCESS and "HTTP 401" in str(raised.value)
        assert loader.stats()["shards_failed"] == 0, "refused credentials are never skipped"


def test_an_epoch_that_delivers_nothing_raises(even_shards):
    """When on_error="skip" drops every shard (here: all of them gone, 404),
    the epoch raises an error that counts the failures and names the last
    one, instead of ending as if the data set were empty."""
    files = served(even_shards[:2])
    with FaultServer(files) as server:
        urls = [server.url("404", name) for name in files]
        loader = eval_loader(urls, on_error="skip", io_retries=0, io_backoff_ms=1)
        for epoch in range(2):
            loader.set_epoch(epoch)
            with pytest.raises(stoker.ReadError) as raised:
                list(loader)
            message = str(raised.value)
            assert f"epoch {epoch} delivered no batch" in message, message
            assert "2 shards failed" in message and "HTTP 404" in message, message


def test_corrupt_data(dataset, write_shard, tmp_path):
    samples = [s for s in dataset if s.url == dataset[0].url][:4]
    samples[1] = samples[1]._replace(jpg=samples[1].jpg[:2] + b"\0" * 200)
    path = write_shard(tmp_path / "corrupt-000000.tar", samples)
    e = caught(lambda: list(eval_loader([path], on_error="fail")), stoker.DataError)
    assert e.code in DATA_CODES and path in str(e) and samples[1].key in str(e), (e.code, str(e))


def test_index_errors_are_one_class_with_their_own_wording(even_shards, stoker_bin, tmp_path):
    """A malformed index, one that lacks a shard and a stale one were
    DataError or OptionError by case, worded as tar errors: now one code
    (STK_EINDEX), one class, an index's words."""
    import json
    import subprocess
    path = tmp_path / "index.json"
    subprocess.run([stoker_bin, "index", "-o", str(path), *even_shards[:2]], check=True,
                   capture_output=True, timeout=60)
    good = json.loads(path.read_text())
    bad = tmp_path / "bad.json"
    cases = [('{"format": "stoker-index", "version": 2, "shards": [[[[]]]]}', "nested too deep"),
             ("{not json", "not valid JSON"),
             (json.dumps(good), "is not in the dataset index")]  # for 3 shards
    errors = []
    for content, words in cases:
        bad.write_text(content)
        e = caught(lambda: eval_loader(even_shards[:3], index=str(bad)), stoker.Error)
        assert e.code == STK_EINDEX and words in str(e), (e.code, str(e))
        errors.append(e)
    os.utime(even_shards[1], ns=(0, 10 ** 9))  # touched after indexing
    try:
        e = caught(lambda: eval_loader(even_shards[:2], index=str(path)), stoker.Error)
    finally:
        os.utime(even_shards[1], ns=(good["shards"][1]["mtime_ns"],) * 2)
    assert e.code == STK_EINDEX
    assert f"the index is stale for {even_shards[1]}: run `stoker index` again" in str(e)
    errors.append(e)
    assert {type(e) for e in errors} == {stoker.DataError}, [type(e) for e in errors]
    assert not any("tar shard" in str(e) for e in errors)


def test_busy(even_shards):
    def run():
        loader = eval_loader(even_shards, max_batches=2)
        held = []
        for images, _ in loader:
            held.append(images)  # the images tensor pins its batch buffer
    e = caught(run, stoker.BusyError)
    assert e.code == STK_EBUSY and "max_batches" in str(e)


def test_every_class_is_a_stoker_error_with_a_code():
    names = [n for n in stoker.__all__ if n.endswith("Error") or n in (
        "NotFound", "OutOfMemory", "Interrupted", "OutputExists")]
    assert len(names) >= 12, names
    for name in names:
        cls = getattr(stoker, name)
        assert issubclass(cls, stoker.Error), name
        assert cls is stoker.Error or isinstance(cls.code, int), name
    # the builtin classes they were before stay
    assert issubclass(stoker.NotFound, FileNotFoundError)
    assert issubclass(stoker.OptionError, ValueError)
    assert issubclass(stoker.ClusterError, ConnectionError)
    # raised from Python, an error carries its class's code
    assert stoker.PlanError("x").code == -1005


def test_error_codes_come_from_the_c_table():
    """stoker._ext._stoker.error_codes is the C library's error table: Python code
    tells codes apart by name, and each code raises the class its row names."""
    from stoker._ext import _stoker
    codes = _stoker.error_codes
    assert codes["EINDEX"] == STK_EINDEX and codes["EHTTP"] == STK_EHTTP
    assert codes["OK"] == 0 and len(codes) == 22, codes
    assert codes["EACCESS"] == STK_EACCESS
    assert stoker.DataError.code == codes["EFORMAT"]
    assert stoker.NotFound.code == codes["ENOENT"] and stoker.OptionTypeError.code == STK_EINVAL
