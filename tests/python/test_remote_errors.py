"""Remote-source failures reach Python as exceptions that name the URL with
its credentials redacted: no password, signature or token in the text."""
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
