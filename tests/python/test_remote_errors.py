# SPDX-License-Identifier: MIT
"""Remote-source failures reach Python as exceptions that name the URL with
its credentials redacted: no password, signature or token in the text."""
import contextlib
import functools
import http.server
import os
import threading
import time

import pytest

import stoker

SECRETS = ("s3cr3tpass", "deadbeefsignature", "sessiontoken42")
URL = ("http://alice:s3cr3tpass@127.0.0.1:1/train-000000.tar"
       "?X-Amz-Signature=deadbeefsignature&X-Amz-Security-Token=sessiontoken42")


def check(exc, text=""):
    message = str(exc.value) + text
    assert "127.0.0.1:1/train-000000.tar" in message, message
    for secret in SECRETS:
        assert secret not in message, message


def test_loader_error_has_no_credentials(capfd):
    loader = stoker.Loader([URL], batch_size=2, image_size=16, threads=1, rank=0, world_size=1,
                           io_retries=1, io_backoff_ms=1, io_timeout_ms=500)
    with pytest.raises(OSError) as exc:
        next(iter(loader))
    check(exc, "".join(capfd.readouterr()))


def test_samples_error_has_no_credentials(capfd):
    with pytest.raises(OSError) as exc:
        next(iter(stoker.Samples([URL], rank=0, world_size=1, io_retries=0, io_backoff_ms=1)))
    check(exc, "".join(capfd.readouterr()))


@contextlib.contextmanager
def http_server(directory):
    """A static file server on 127.0.0.1 for directory; yields its port."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=directory)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def test_samples_url_of_an_http_shard_is_the_redacted_url(even_shards):
    """__url__ is read after the shard's HTTP source was closed: it must
    still be the shard's (redacted) URL, not freed memory."""
    names = [os.path.basename(p) for p in even_shards[:2]]
    with http_server(os.path.dirname(even_shards[0])) as port:
        urls = [f"http://alice:s3cr3tpass@127.0.0.1:{port}/{n}?X-Amz-Signature=deadbeefsignature"
                for n in names]
        got = [d["__url__"] for d in stoker.Samples(urls, shuffle=False, rank=0, world_size=1)]
    want = [f"http://***@127.0.0.1:{port}/{n}?X-Amz-Signature=***" for n in names]
    assert got == [want[0]] * 20 + [want[1]] * 20, got[:3]


def test_slow_consumer_never_makes_a_stream_too_slow(dataset, write_shard, tmp_path):
    """The minimum rate is judged on the time a reader waits for bytes: a
    training loop that takes its batches slowly but steadily (the reader
    then waits for room, and its stream for the reader) gets no retry, even
    with a minimum rate far above the pace it reads at."""
    write_shard(tmp_path / "big.tar", dataset)  # 120 photos, about 10 MB
    with http_server(str(tmp_path)) as port:
        loader = stoker.Loader([f"http://127.0.0.1:{port}/big.tar"], batch_size=4, image_size=32,
                               threads=1, shards_in_flight=1, shuffle=False, rank=0,
                               world_size=1, max_batches=2, prefetch_bytes_per_shard=65536,
                               io_timeout_ms=1000, io_retries=0, io_min_rate=100 << 20)
        batches = 0
        for images, labels in loader:
            batches += 1
            time.sleep(0.1)  # about 3.5 MB/s of photos
        stats = loader.stats()
        loader.close()
    assert batches == 30, batches
    assert stats["retries"] == 0, stats
