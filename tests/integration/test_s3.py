# SPDX-License-Identifier: MIT
"""s3:// and gs:// shards and prefix listings.

Against s3rver (an S3 emulator, installed with npm on first use): epochs
over s3:// equal the local epochs sample for sample, and a prefix listing
finds exactly the shards, across several pages. s3rver does not check
signatures, so a second server (servers.SigV4Server) recomputes every
request's AWS Signature V4 with botocore and refuses any mismatch: epochs,
Range resumes and listings must pass it with and without a session token,
and through the gs:// mapping (HMAC keys and bearer tokens). Failing cases
must name the redacted URL and print no secret, token or signature.
"""
import pytest

from conftest import make_samples, write_shard
from servers import DelayProxy, S3rver, ServedInThread, SigV4Server

N_SHARDS = 4
# Shard i of the local data is stored as NAMES[i].
NAMES = ("train/shard-0.tar", "train/shard-1.tar", "train/sub/shard-2.tar",
         "train/odd name&+=3.tar")
SIZES = lambda i, j: 1000 + (i * 977 + j * 131) % 40000  # noqa: E731
FAST = ["--io-timeout-ms", "2000", "--io-backoff-ms", "20", "--io-retries", "3"]
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN//////////wEaDEXAMPLE+/=="
BEARER = "ya29.EXAMPLE-bearer-token_0123456789"
# Every variable stoker reads for object stores, so the host's own cloud
# setup (or its absence) cannot change a test. Empty means unset.
CLEAN_ENV = {k: "" for k in (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE", "GCS_HMAC_ACCESS_ID", "GCS_HMAC_SECRET",
    "GOOGLE_OAUTH_ACCESS_TOKEN", "CLOUDSDK_AUTH_ACCESS_TOKEN", "STOKER_GCS_ENDPOINT",
    "STOKER_LIST_MAX_KEYS", "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG",
    "GCE_METADATA_HOST", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT")}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("s3-data")
    return [write_shard(root / f"shard-{i}.tar", make_samples(20, start=20 * i, size=SIZES))
            for i in range(N_SHARDS)]


def objects(shards):
    """The bucket's content: the shards under train/ (one in a nested
    "directory", one with characters that need escaping in a URL and in
    XML), plus objects a listing must leave out."""
    names = list(NAMES)
    objs = {n: p.read_bytes() for n, p in zip(names, shards)}
    objs.update({"train/README.md": b"not a shard", "train/index.json": b"{}",
                 "val/shard-9.tar": shards[0].read_bytes()})
    return names, objs


def env(**kw):
    # No probe of the metadata addresses: test_cloud_creds.py serves those.
    out = dict(CLEAN_ENV, HOME="/nonexistent", AWS_EC2_METADATA_DISABLED="true",
               NO_GCE_CHECK="true")
    out.update(kw)
    return out


def ls(run, urls, e, *extra):
    proc = run(["ls", *FAST, *extra, *urls], env=e)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def assert_no_secret(proc, *secrets):
    out = proc.stdout + proc.stderr
    for s in secrets:
        assert s and s not in out, f"secret {s[:4]}... printed"


# ---------------------------------------------------------------- s3rver

@pytest.fixture(scope="module")
def s3rver(shards, tmp_path_factory):
    try:
        server = S3rver(tmp_path_factory.mktemp("s3rver"), ["bkt"])
        server.__enter__()
    except RuntimeError as e:  # `make test` installs s3rver: its absence is a failure
        pytest.fail(str(e), pytrace=False)
    try:
        names, objs = objects(shards)
        client = server.client()
        for key, data in objs.items():
            client.put_object(Bucket="bkt", Key=key, Body=data)
        yield server
    finally:
        server.stop()


def s3rver_env(server, **kw):
    return env(AWS_ACCESS_KEY_ID=server.KEY, AWS_SECRET_ACCESS_KEY=server.SECRET,
               AWS_ENDPOINT_URL=server.endpoint + "/", **kw)


def test_s3rver_epochs_equal_local(run, bench_json, s3rver, shards):
    names, _ = objects(shards)
    e = s3rver_env(s3rver)
    urls = [f"s3://bkt/{n}" for n in names]
    local = ls(run, shards, e)
    assert local.count("\n") == 20 * N_SHARDS
    assert ls(run, urls, e) == local
    args = ["--threads", "2", "--shards-in-flight", "3", "--epochs", "2", "--batch-size", "7",
            "--seed", "3", *FAST]
    want = bench_json([*args, *shards], env=e)
    got = bench_json([*args, *urls], env=e)
    assert got["samples"] == want["samples"] == 2 * 20 * N_SHARDS
    assert got["member_bytes"] == want["member_bytes"]
    member = "000079.jpg"
    a = run(["cat", shards[3], member], text=False, env=e)
    b = run(["cat", urls[3], member], text=False, env=e)
    assert a.returncode == b.returncode == 0, b.stderr
    assert a.stdout == b.stdout and len(a.stdout) > 500


def test_s3rver_range_resume_after_cut_connections(run, s3rver, shards):
    """Every connection to s3rver is cut after 300 KB: each shard (about 1 MB)
    continues with signed Range requests, and the samples equal local."""
    names, _ = objects(shards)
    with DelayProxy(s3rver.port, delay_s=0, cut_after=300_000) as proxy:
        e = s3rver_env(s3rver)
        e["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.port}"
        local = ls(run, shards, e)
        got = run(["bench", "--json", "--no-shuffle", *FAST,
                   *[f"s3://bkt/{n}" for n in names]], env=e)
        assert got.returncode == 0, got.stderr
        report = __import__("json").loads(got.stdout)
        assert report["resumes"] >= N_SHARDS and proxy.cuts >= N_SHARDS
        assert ls(run, [f"s3://bkt/{n}" for n in names], e) == local


@pytest.mark.parametrize("max_keys", ["", "2"])
def test_s3rver_prefix_listing_finds_exactly_the_shards(run, s3rver, shards, max_keys):
    names, _ = objects(shards)
    e = s3rver_env(s3rver, STOKER_LIST_MAX_KEYS=max_keys)
    explicit = ls(run, [f"s3://bkt/{n}" for n in sorted(names)], e)
    assert ls(run, ["s3://bkt/train/"], e) == explicit
    # Shards listed are those of the prefix only, whatever else the bucket has.
    assert ls(run, ["s3://bkt/val/"], e) == ls(run, [shards[0]], e)


def test_s3rver_missing_object_and_prefix(run, s3rver):
    e = s3rver_env(s3rver)
    proc = run(["ls", *FAST, "s3://bkt/train/nope.tar"], env=e)
    assert proc.returncode == 1
    assert "s3://bkt/train/nope.tar: HTTP 404" in proc.stderr
    proc = run(["ls", *FAST, "s3://bkt/nothing-here/"], env=e)
    assert proc.returncode == 1
    assert "s3://bkt/nothing-here/: no shards" in proc.stderr


# ----------------------------------------------- signature-checking server

@pytest.fixture
def signed(shards):
    names, objs = objects(shards)
    with SigV4Server("bkt", objs, secret=SECRET) as server:
        yield server


def signed_env(server, secret=SECRET, **kw):
    return env(AWS_ACCESS_KEY_ID=server.key_id, AWS_SECRET_ACCESS_KEY=secret,
               AWS_ENDPOINT_URL=server.endpoint, **kw)


@pytest.mark.parametrize("token", [None, TOKEN])
def test_sigv4_every_request_verified(run, bench_json, shards, token):
    names, objs = objects(shards)
    with SigV4Server("bkt", objs, secret=SECRET, token=token) as server:
        e = signed_env(server, AWS_SESSION_TOKEN=token or "")
        local = ls(run, shards, e)
        assert ls(run, [f"s3://bkt/{n}" for n in names], e) == local
        # Listing over three pages: continuation tokens full of '+', '/', '='.
        listed = ls(run, ["s3://bkt/train/"], dict(e, STOKER_LIST_MAX_KEYS="2"))
        assert listed == ls(run, [f"s3://bkt/{n}" for n in sorted(names)], e)
        got = bench_json(["--epochs", "2", "--threads", "2", *FAST, "s3://bkt/train/"], env=e)
        assert got["samples"] == 2 * 20 * N_SHARDS
        lists = [r for r in server.requests if r["path"] == "/bkt"]
        assert len(lists) == 4 and sum("continuation-token" in r["query"] for r in lists) == 2
        assert len(server.requests) >= 4 + 3 * N_SHARDS
        assert all(r["ok"] for r in server.requests), [r for r in server.requests if not r["ok"]]


def test_sigv4_range_resume_is_signed_again(run, shards):
    names, objs = objects(shards)
    with SigV4Server("bkt", objs, secret=SECRET, token=TOKEN, drop_first=names) as server:
        e = signed_env(server, AWS_SESSION_TOKEN=TOKEN)
        local = ls(run, shards, e)
        assert ls(run, [f"s3://bkt/{n}" for n in names], e) == local
        ranges = [r["range"] for r in server.requests if r["range"]]
        assert len(ranges) == N_SHARDS, server.requests
        assert all(r["ok"] for r in server.requests)
        assert all(server.gets[n] == 2 for n in names)


def test_sigv4_wrong_secret_is_a_clear_403(run, signed):
    proc = run(["ls", *FAST, "s3://bkt/train/shard-1.tar"],
               env=signed_env(signed, secret="not-the-secret"))
    assert proc.returncode == 1
    assert "s3://bkt/train/shard-1.tar: HTTP 403" in proc.stderr, proc.stderr
    assert signed.requests and not any(r["ok"] for r in signed.requests)
    assert len(signed.requests) == 1  # 403 is an answer: no retry
    assert_no_secret(proc, "not-the-secret", *signed.signatures)
    proc = run(["ls", *FAST, "s3://bkt/train/"], env=signed_env(signed, secret="not-the-secret"))
    assert proc.returncode == 1
    assert "s3://bkt/train/: HTTP 403" in proc.stderr and "listing" in proc.stderr


def test_profile_credentials(run, shards, tmp_path, signed):
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n\n"
                     f"[train]\naws_access_key_id = {signed.key_id}\n"
                     f"aws_secret_access_key = {SECRET}\n")
    e = env(AWS_PROFILE="train", AWS_SHARED_CREDENTIALS_FILE=str(creds),
            AWS_ENDPOINT_URL=signed.endpoint)
    assert ls(run, ["s3://bkt/train/shard-0.tar"], e) == ls(run, [shards[0]], e)
    assert signed.requests and all(r["ok"] for r in signed.requests)
    proc = run(["ls", "s3://bkt/train/shard-0.tar"], env=dict(e, AWS_PROFILE="nope"))
    assert proc.returncode == 1 and "no profile [nope] in the AWS credentials file" in proc.stderr
    assert_no_secret(proc, SECRET)


# ------------------------------------------------------------------- gcs

def test_gcs_hmac_keys(run, shards):
    names, objs = objects(shards)
    with SigV4Server("gbkt", objs, key_id="GOOGHMACID", secret=SECRET, region="auto") as server:
        e = env(GCS_HMAC_ACCESS_ID="GOOGHMACID", GCS_HMAC_SECRET=SECRET,
                STOKER_GCS_ENDPOINT=server.endpoint)
        assert ls(run, ["gs://gbkt/train/"], e) == ls(run, [shards[i] for i in (3, 0, 1, 2)], e)
        assert all(r["ok"] for r in server.requests) and len(server.requests) == 1 + N_SHARDS


def test_gcs_bearer_token(run, shards):
    names, objs = objects(shards)
    with SigV4Server("gbkt", objs, auth="bearer", bearer=BEARER) as server:
        e = env(GOOGLE_OAUTH_ACCESS_TOKEN=BEARER, STOKER_GCS_ENDPOINT=server.endpoint)
        assert ls(run, [f"gs://gbkt/{n}" for n in names], e) == ls(run, shards, e)
        assert ls(run, ["gs://gbkt/train/"], dict(e, STOKER_LIST_MAX_KEYS="3")).count("\n") == 80
        assert all(r["ok"] for r in server.requests)
        proc = run(["ls", *FAST, "gs://gbkt/train/shard-0.tar"],
                   env=dict(e, GOOGLE_OAUTH_ACCESS_TOKEN="", CLOUDSDK_AUTH_ACCESS_TOKEN="wrong"))
        assert proc.returncode == 1
        assert "gs://gbkt/train/shard-0.tar: HTTP 401" in proc.stderr
        assert_no_secret(proc, BEARER, "wrong")


# ------------------------------------------------------------ no leaks

@pytest.mark.parametrize("case", ["bad-secret", "missing-key", "missing-bucket", "list-403",
                                  "refused", "bad-bucket-name"])
def test_failures_print_no_secret(run, signed, case):
    e = signed_env(signed, AWS_SESSION_TOKEN=TOKEN)
    url = {"missing-key": "s3://bkt/train/nope.tar", "missing-bucket": "s3://other/x.tar",
           "list-403": "s3://bkt/train/", "bad-bucket-name": "s3://user:pa55word@bkt/k.tar"}.get(
        case, "s3://bkt/train/shard-0.tar")
    if case in ("bad-secret", "list-403"):
        e["AWS_SECRET_ACCESS_KEY"] = "wrong-" + SECRET
    if case == "refused":
        from servers import free_port
        e["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    proc = run(["ls", "--io-timeout-ms", "1000", "--io-backoff-ms", "10", "--io-retries", "1",
                url], env=e)
    assert proc.returncode == 1
    shown = "s3://***@bkt/k.tar" if case == "bad-bucket-name" else url
    assert shown in proc.stderr, proc.stderr
    assert_no_secret(proc, SECRET, TOKEN, "pa55word", *signed.signatures)
    # The signature alphabet is hex: make sure the test saw some when it should.
    if case in ("bad-secret", "missing-key", "list-403"):
        assert signed.signatures


def test_index_of_a_prefix(run, signed, tmp_path):
    """`stoker index` lists a prefix as the loader does."""
    import json
    out = tmp_path / "index.json"
    proc = run(["index", "-o", out, "s3://bkt/train/"], env=signed_env(signed))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    for n in NAMES:
        assert json.dumps(f"s3://bkt/{n}")[1:-1] in text
    assert "README" not in text and all(r["ok"] for r in signed.requests)



# ------------------------------------------------------------- redirects

class Recording(ServedInThread):
    """A server on its own port that records each request's path and
    headers (requests) and answers with respond(h)."""

    def __init__(self, objs):
        self.objs = objs
        self.requests = []

    def handle(self, h):
        self.requests.append((h.path, dict(h.headers)))
        self.respond(h)

    @staticmethod
    def send(h, code, body, headers=()):
        h.send_response(code)
        for name, value in headers:
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


class Recorder(Recording):
    """Serves every object it is asked for (200, whole body)."""

    def respond(self, h):
        body = self.objs.get(h.path.split("?")[0].split("/", 2)[-1])
        self.send(h, 404 if body is None else 200, body or b"")


class Redirector(Recording):
    """An "endpoint" that answers GET /bkt/KEY with a 307 to location(KEY)
    (absolute or relative), and serves /moved/KEY itself."""

    def __init__(self, objs, location):
        super().__init__(objs)
        self.location = location

    def respond(self, h):
        path = h.path.split("?")[0]
        if path.startswith("/moved/"):
            return self.send(h, 200, self.objs[path[len("/moved/"):]])
        self.send(h, 307, b"moved\n", [("Location", self.location(path.split("/", 2)[2]))])


def credential_headers(headers):
    return {k for k in headers if k.lower() in ("authorization", "x-amz-security-token",
                                                  "x-amz-date", "x-amz-content-sha256")}


@pytest.mark.parametrize("target", ["other-port", "other-host-name"])
def test_credentials_never_follow_a_redirect_to_another_origin(run, shards, target):
    """An S3 endpoint that redirects to another port (or another host name
    for the same address) must not get the session token or the signature
    forwarded there: stoker refuses the redirect and names both URLs."""
    names, objs = objects(shards)
    with Recorder(objs) as other:
        host = "127.0.0.1" if target == "other-port" else "localhost"
        with Redirector(objs, lambda key: f"http://{host}:{other.port}/bkt/{key}?sig=abc") as ep:
            e = env(AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY=SECRET,
                    AWS_SESSION_TOKEN=TOKEN, AWS_ENDPOINT_URL=f"http://127.0.0.1:{ep.port}")
            proc = run(["ls", *FAST, f"s3://bkt/{names[0]}"], env=e)
            assert ep.requests and TOKEN in ep.requests[0][1].values()
    for path, headers in other.requests:
        assert TOKEN not in headers.values(), "the session token went to another origin"
        assert not credential_headers(headers), (path, headers)
    assert proc.returncode == 1, proc.stdout
    assert f"s3://bkt/{names[0]}: redirected to http://{host}:{other.port}/bkt/{names[0]}" \
        f"?sig=***" in proc.stderr, proc.stderr
    assert_no_secret(proc, SECRET, TOKEN)


def test_credentials_follow_a_redirect_within_the_origin(run, shards):
    """A redirect to the same scheme, host and port (a relative Location)
    is followed, credentials and all."""
    names, objs = objects(shards)
    with Redirector(objs, lambda key: f"/moved/{key}") as ep:
        e = env(AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY=SECRET,
                AWS_SESSION_TOKEN=TOKEN, AWS_ENDPOINT_URL=f"http://127.0.0.1:{ep.port}")
        assert ls(run, [f"s3://bkt/{names[1]}"], e) == ls(run, [shards[1]], e)
        paths = [p for p, _ in ep.requests]
        assert paths == [f"/bkt/{names[1]}", f"/moved/{names[1]}"], paths
        assert all(TOKEN in h.values() for _, h in ep.requests)
    with Redirector(objs, lambda key: f"/bkt/{key}") as ep:  # a loop
        e["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{ep.port}"
        proc = run(["ls", *FAST, f"s3://bkt/{names[1]}"], env=e)
        assert proc.returncode == 1
        assert "more than 5 redirects" in proc.stderr and len(ep.requests) == 6, proc.stderr


def test_plain_http_still_follows_redirects_anywhere(run, shards):
    """Without credentials a redirect to another origin (a CDN) is fine."""
    names, objs = objects(shards)
    with Recorder(objs) as other:
        with Redirector(objs, lambda key: f"http://127.0.0.1:{other.port}/bkt/{key}") as ep:
            url = f"http://127.0.0.1:{ep.port}/bkt/{names[2]}"
            assert ls(run, [url], env()) == ls(run, [shards[2]], env())
    assert len(other.requests) == 1


def test_userinfo_never_follows_a_redirect_to_another_origin(run, shards):
    names, objs = objects(shards)
    with Recorder(objs) as other:
        with Redirector(objs, lambda key: f"http://127.0.0.1:{other.port}/bkt/{key}") as ep:
            url = f"http://user:s3cr3tpass@127.0.0.1:{ep.port}/bkt/{names[2]}"
            proc = run(["ls", *FAST, url], env=env())
    assert proc.returncode == 1
    assert other.requests == []
    assert f"http://***@127.0.0.1:{ep.port}/bkt/{names[2]}: redirected to " \
        f"http://127.0.0.1:{other.port}/bkt/{names[2]}" in proc.stderr, proc.stderr
    assert_no_secret(proc, "s3cr3tpass")
