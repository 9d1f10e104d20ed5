"""Remote-source failures reach Python as exceptions that name the URL with
its credentials redacted: no password, signature or token in the text."""
import os

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


def test_samples_url_of_an_http_shard_is_the_redacted_url(even_shards, tmp_path):
    """__url__ is read after the shard's HTTP source was closed: it must
    still be the shard's (redacted) URL, not freed memory."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=os.path.dirname(even_shards[0]))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        port = httpd.server_address[1]
        names = [os.path.basename(p) for p in even_shards[:2]]
        urls = [f"http://alice:s3cr3tpass@127.0.0.1:{port}/{n}?X-Amz-Signature=deadbeefsignature"
                for n in names]
        got = [d["__url__"] for d in stoker.Samples(urls, shuffle=False, rank=0, world_size=1)]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
    want = [f"http://***@127.0.0.1:{port}/{n}?X-Amz-Signature=***" for n in names]
    assert got == [want[0]] * 20 + [want[1]] * 20, got[:3]
