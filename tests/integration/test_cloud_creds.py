# SPDX-License-Identifier: MIT
"""Cloud credentials as the platforms hand them out (issue 34).

One local server (Issuer) plays every credential endpoint a platform runs,
checking what it receives as the real ones do: Google's token endpoint
(the service-account JWT's RS256 signature against the key's public half,
its claims and grant type; refresh-token grants), the GCE metadata server
(requires Metadata-Flavor: Google), STS AssumeRoleWithWebIdentity, EC2
IMDSv2 (requires the session token from its PUT) and the ECS/EKS container
credentials endpoint (requires the authorization token). Each answer is a
new credential with a short life; the object store (servers.SigV4Server,
which recomputes every SigV4 signature with botocore) accepts only issued,
unexpired ones. Nothing printed may hold a key, token or assertion.
"""
import json
import re
import sys
import time
import threading
import urllib.parse
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from conftest import make_samples, write_shard
from servers import DelayProxy, ServedInThread, SigV4Server, free_port

N_SHARDS = 3
FAST = ["--io-timeout-ms", "4000", "--io-backoff-ms", "20", "--io-retries", "3"]
SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
ROLE = "arn:aws:iam::123456789012:role/train"
WEB_TOKEN = "eyWEBIDENTITY.token-from-the-kubelet.sig"
CONTAINER_TOKEN = "container-authorization-token-42"
REFRESH_TOKEN = "1//refresh-token-EXAMPLE"
CLIENT_SECRET = "client-secret-EXAMPLE"
VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
        "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
        "AWS_SHARED_CREDENTIALS_FILE", "GCS_HMAC_ACCESS_ID", "GCS_HMAC_SECRET",
        "GOOGLE_OAUTH_ACCESS_TOKEN", "CLOUDSDK_AUTH_ACCESS_TOKEN", "STOKER_GCS_ENDPOINT",
        "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST",
        "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ENDPOINT_URL_STS",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT", "STOKER_LIST_MAX_KEYS", "AWS_CONFIG_FILE",
        "AWS_ROLE_SESSION_NAME")
SOURCE_KEY_ID, SOURCE_SECRET = "AKIDSOURCEPROFILE", "source-profile-secret-EXAMPLE"
PROCESS_ARGS = ["two words", "$HOME;x", "it's"]  # reach the program literally: no shell


def env(**kw):
    out = {k: "" for k in VARS}
    out.update(HOME="/nonexistent", AWS_EC2_METADATA_DISABLED="true", NO_GCE_CHECK="true")
    out.update(kw)
    return out


class Issuer(ServedInThread):
    """Every credential endpoint, handing out credentials that live
    `life_s` seconds (expires_in, or an absolute Expiration shifted by
    `skew_s`). lookup()/bearer_ok() are what the object store accepts."""

    def __init__(self, key, life_s=3600, skew_s=0):
        self.public = key.public_key()
        self.life_s, self.skew_s = life_s, skew_s
        self.keys, self.bearers = {}, {}
        self.log = []   # (endpoint, verdict)
        self.issued = []  # every secret handed out, to look for in output
        self.refuse_refresh = False
        self.sts_regions = []
        self.lock = threading.Lock()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def lookup(self, key_id):
        with self.lock:
            k = self.keys.get(key_id)
        return None if k is None or time.time() > k[2] else k[:2]

    def bearer_ok(self, token):
        with self.lock:
            t = self.bearers.get(token)
        return t is not None and time.time() <= t

    def revoke_all(self):
        with self.lock:
            self.keys.clear()
            self.bearers.clear()

    def note(self, what, ok):
        with self.lock:
            self.log.append((what, ok))

    def count(self, what):
        with self.lock:
            return sum(1 for w, ok in self.log if w == what and ok)

    def mint_bearer(self):
        token = "ya29." + uuid.uuid4().hex
        with self.lock:
            self.bearers[token] = time.time() + self.life_s
            self.issued.append(token)
        return {"access_token": token, "expires_in": self.life_s, "token_type": "Bearer"}

    def mint_keys(self):
        key_id, secret, token = ("ASIA" + uuid.uuid4().hex[:16].upper(), uuid.uuid4().hex,
                                 "IQoJ" + uuid.uuid4().hex)
        expires = time.time() + self.life_s
        with self.lock:
            self.keys[key_id] = (secret, token, expires)
            self.issued += [secret, token]
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires + self.skew_s))
        return key_id, secret, token, when

    @staticmethod
    def send(h, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        h.send_response(code)
        if h.path.startswith("/computeMetadata/"):
            h.send_header("Metadata-Flavor", "Google")
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def handle(self, h):
        path = h.path.split("?")[0]
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n).decode() if n else ""
        form = dict(urllib.parse.parse_qsl(body))
        if h.command == "POST" and path == "/token":
            return self.token(h, form)
        if h.command == "POST" and path == "/sts/" and form.get("Action") == "AssumeRole":
            return self.assume_role(h, path, body, form)
        if h.command == "POST" and path == "/sts/":
            return self.sts(h, form)
        if h.command == "POST" and path == "/process":
            ok = json.loads(body) == PROCESS_ARGS
            self.note("process", ok)
            key_id, secret, token, when = self.mint_keys()
            return self.send(h, 200, json.dumps({"Version": 1, "AccessKeyId": key_id,
                                                 "SecretAccessKey": secret, "SessionToken": token,
                                                 "Expiration": when}))
        if path == "/computeMetadata/v1/instance/service-accounts/default/token":
            ok = h.headers.get("Metadata-Flavor") == "Google"
            self.note("metadata", ok)
            return self.send(h, 200 if ok else 403, json.dumps(self.mint_bearer()) if ok else "{}")
        if path.startswith("/latest/"):
            return self.imds(h, path)
        if path == "/container-creds":
            ok = h.headers.get("Authorization") == CONTAINER_TOKEN
            self.note("container", ok)
            if not ok:
                return self.send(h, 401, '{"message":"bad token"}')
            key_id, secret, token, when = self.mint_keys()
            return self.send(h, 200, json.dumps({"AccessKeyId": key_id, "SecretAccessKey": secret,
                                                 "Token": token, "Expiration": when}))
        self.send(h, 404, "{}")

    def token(self, h, form):
        grant = form.get("grant_type")
        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            try:
                claims = jwt.decode(form["assertion"], self.public, algorithms=["RS256"],
                                    audience=f"{self.url}/token")
                ok = (claims["iss"] == "trainer@proj.iam.gserviceaccount.com"
                      and claims["scope"] == SCOPE and 0 < claims["exp"] - claims["iat"] <= 3600
                      and abs(claims["iat"] - time.time()) < 300
                      and jwt.get_unverified_header(form["assertion"])["kid"] == "kid-1")
            except (jwt.PyJWTError, KeyError):
                ok = False
            self.note("jwt", ok)
            if not ok:
                return self.send(h, 400, '{"error":"invalid_grant","error_description":"Invalid JWT Signature."}')
            return self.send(h, 200, json.dumps(self.mint_bearer()))
        if grant == "refresh_token":
            ok = (form.get("refresh_token") == REFRESH_TOKEN and form.get("client_secret") ==
                  CLIENT_SECRET and form.get("client_id") == "cid.apps.googleusercontent.com"
                  and not self.refuse_refresh)
            self.note("refresh", ok)
            if not ok:
                return self.send(h, 400, '{"error":"invalid_grant","error_description":"Token has been expired or revoked."}')
            return self.send(h, 200, json.dumps(self.mint_bearer()))
        self.note("token", False)
        self.send(h, 400, '{"error":"unsupported_grant_type"}')

    def sts(self, h, form):
        ok = (form.get("Action") == "AssumeRoleWithWebIdentity" and form.get("RoleArn") == ROLE
              and form.get("WebIdentityToken") == WEB_TOKEN and form.get("RoleSessionName"))
        self.note("sts", ok)
        if not ok:
            return self.send(h, 403, "<ErrorResponse><Error><Code>AccessDenied</Code><Message>"
                             "Not authorized</Message></Error></ErrorResponse>", "text/xml")
        key_id, secret, token, when = self.mint_keys()
        self.send(h, 200, "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/"
                  "doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials>"
                  f"<AccessKeyId>{key_id}</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey>"
                  f"<SessionToken>{token}</SessionToken><Expiration>{when}</Expiration>"
                  "</Credentials></AssumeRoleWithWebIdentityResult>"
                  "</AssumeRoleWithWebIdentityResponse>", "text/xml")

    def sigv4_problem(self, h, path, body):
        """Recompute the SigV4 signature of an STS request with botocore, for
        the source profile's static keys or credentials this issuer minted."""
        import datetime
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/sts/aws4_request,"
                     r"\s*SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$",
                     h.headers.get("Authorization", ""))
        if not m:
            return "no AWS4-HMAC-SHA256 Authorization header for sts"
        key_id, day, region, signed, signature = m.groups()
        secret, token = (SOURCE_SECRET, None) if key_id == SOURCE_KEY_ID else \
            (self.lookup(key_id) or (None, None))
        if secret is None:
            return f"unknown key {key_id}"
        signed = signed.split(";")
        if token is not None and ("x-amz-security-token" not in signed
                                  or h.headers.get("X-Amz-Security-Token") != token):
            return "session token missing or not signed"
        amz_date = h.headers.get("x-amz-date", "")
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc)
        if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 900:
            return "x-amz-date too far from now"
        request = AWSRequest(method="POST", url=f"http://{h.headers.get('Host')}{path}",
                             data=body.encode(), headers={k: h.headers.get(k, "") for k in signed})
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(Credentials(key_id, secret, token), "sts", region)
        expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(
            request)), request)
        self.sts_regions.append(region)
        return None if expected == signature else "SignatureDoesNotMatch"

    def assume_role(self, h, path, body, form):
        problem = self.sigv4_problem(h, path, body)
        ok = (problem is None and form.get("RoleArn") == ROLE
              and form.get("RoleSessionName") == "trainer-1" and form.get("Version") == "2011-06-15")
        self.note("assume-role", ok)
        if not ok:
            return self.send(h, 403, "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code>"
                             f"<Message>{problem}</Message></Error></ErrorResponse>", "text/xml")
        key_id, secret, token, when = self.mint_keys()
        self.send(h, 200, "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
                  f"<AssumeRoleResult><Credentials><AccessKeyId>{key_id}</AccessKeyId>"
                  f"<SecretAccessKey>{secret}</SecretAccessKey><SessionToken>{token}</SessionToken>"
                  f"<Expiration>{when}</Expiration></Credentials></AssumeRoleResult>"
                  "</AssumeRoleResponse>", "text/xml")

    def imds(self, h, path):
        if h.command == "PUT" and path == "/latest/api/token":
            ok = h.headers.get("X-aws-ec2-metadata-token-ttl-seconds") == "21600"
            self.note("imds-token", ok)
            return self.send(h, 200 if ok else 400, "imds-session-" + ("x" * 20), "text/plain")
        if h.headers.get("X-aws-ec2-metadata-token") != "imds-session-" + "x" * 20:
            self.note("imds", False)
            return self.send(h, 401, "", "text/plain")
        if path == "/latest/meta-data/iam/security-credentials/":
            return self.send(h, 200, "train-role\n", "text/plain")
        if path == "/latest/meta-data/iam/security-credentials/train-role":
            self.note("imds", True)
            key_id, secret, token, when = self.mint_keys()
            return self.send(h, 200, json.dumps({"Code": "Success", "AccessKeyId": key_id,
                                                 "SecretAccessKey": secret, "Token": token,
                                                 "Expiration": when}))
        self.send(h, 404, "", "text/plain")


@pytest.fixture(scope="module")
def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("creds-data")
    return [write_shard(root / f"shard-{i}.tar",
                        make_samples(12, start=12 * i, size=lambda i, j: 20000 + 997 * j))
            for i in range(N_SHARDS)]


def objects(shards):
    return {f"train/shard-{i}.tar": p.read_bytes() for i, p in enumerate(shards)}


def urls(scheme, bucket="bkt"):
    return [f"{scheme}://{bucket}/train/shard-{i}.tar" for i in range(N_SHARDS)]


def ls(run, args, e):
    proc = run(["ls", *FAST, *args], env=e)
    assert proc.returncode == 0, proc.stderr
    return proc


def assert_no_secret(proc, *secrets):
    out = proc.stdout + proc.stderr
    for s in secrets:
        assert s and s not in out, f"secret {s[:6]}... printed"


def key_file(tmp_path, rsa_key, issuer):
    pem = rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    path = tmp_path / "sa.json"
    path.write_text(json.dumps({"type": "service_account", "project_id": "proj",
                                "private_key_id": "kid-1", "private_key": pem,
                                "client_email": "trainer@proj.iam.gserviceaccount.com",
                                "token_uri": f"{issuer.url}/token"}))
    return path, pem


# ------------------------------------------------------------------- GCS

def test_gcs_service_account_key_file(run, shards, tmp_path, rsa_key):
    with Issuer(rsa_key) as issuer, \
            SigV4Server("gbkt", objects(shards), auth="bearer", issuer=issuer) as gcs:
        path, pem = key_file(tmp_path, rsa_key, issuer)
        e = env(GOOGLE_APPLICATION_CREDENTIALS=str(path), STOKER_GCS_ENDPOINT=gcs.endpoint)
        got = ls(run, ["-v", *urls("gs", "gbkt")], e)
        assert got.stdout == ls(run, shards, e).stdout
        assert issuer.count("jwt") == 1 and all(ok for _, ok in issuer.log), issuer.log
        assert gcs.requests and all(r["ok"] for r in gcs.requests)
        assert f"credentials file {path}" in got.stderr and "service account trainer@" in got.stderr
        assert_no_secret(got, pem.splitlines()[1], *issuer.issued)


def test_gcs_metadata_server(run, shards, rsa_key):
    with Issuer(rsa_key) as issuer, \
            SigV4Server("gbkt", objects(shards), auth="bearer", issuer=issuer) as gcs:
        e = env(GCE_METADATA_HOST=f"127.0.0.1:{issuer.port}", STOKER_GCS_ENDPOINT=gcs.endpoint,
                NO_GCE_CHECK="")
        got = ls(run, ["-v", *urls("gs", "gbkt")], e)
        assert got.stdout == ls(run, shards, e).stdout
        assert issuer.count("metadata") == 1 and all(ok for _, ok in issuer.log), issuer.log
        assert all(r["ok"] for r in gcs.requests)
        assert "metadata server http://127.0.0.1" in got.stderr
        assert_no_secret(got, *issuer.issued)


def adc_dir(tmp_path, issuer):
    d = tmp_path / "gcloud"
    d.mkdir()
    (d / "application_default_credentials.json").write_text(json.dumps({
        "type": "authorized_user", "client_id": "cid.apps.googleusercontent.com",
        "client_secret": CLIENT_SECRET, "refresh_token": REFRESH_TOKEN,
        "token_uri": f"{issuer.url}/token"}))
    return d


def test_gcs_gcloud_adc_file_and_expired_refresh_token(run, shards, tmp_path, rsa_key):
    with Issuer(rsa_key) as issuer, \
            SigV4Server("gbkt", objects(shards), auth="bearer", issuer=issuer) as gcs:
        e = env(CLOUDSDK_CONFIG=str(adc_dir(tmp_path, issuer)), STOKER_GCS_ENDPOINT=gcs.endpoint)
        got = ls(run, urls("gs", "gbkt"), e)
        assert got.stdout == ls(run, shards, e).stdout
        assert issuer.count("refresh") == 1 and all(r["ok"] for r in gcs.requests)
        issuer.refuse_refresh = True
        proc = run(["ls", *FAST, urls("gs", "gbkt")[0]], env=e)
        assert proc.returncode == 1
        assert "authorized_user" in proc.stderr and "invalid_grant" in proc.stderr
        assert "expired or was revoked" in proc.stderr and "gcloud auth application-default " \
            "login" in proc.stderr, proc.stderr
        assert_no_secret(proc, REFRESH_TOKEN, CLIENT_SECRET, *issuer.issued)


def test_gcs_external_account_is_refused_by_name(run, tmp_path):
    path = tmp_path / "wif.json"
    path.write_text(json.dumps({"type": "external_account", "audience": "//iam"}))
    proc = run(["ls", *FAST, "gs://b/k.tar"], env=env(GOOGLE_APPLICATION_CREDENTIALS=str(path)))
    assert proc.returncode == 1
    assert f"gs://b/k.tar: credentials file {path}" in proc.stderr
    assert '"external_account" (workload identity federation) are not supported' in proc.stderr


def test_gcs_key_file_missing_or_not_json(run, tmp_path):
    missing = tmp_path / "nope.json"
    proc = run(["ls", *FAST, "gs://b/k.tar"], env=env(GOOGLE_APPLICATION_CREDENTIALS=str(missing)))
    assert proc.returncode == 1
    assert "gs://b/k.tar: cannot read credentials file ($GOOGLE_APPLICATION_CREDENTIALS) " \
        f"{missing}: No such file or directory" in proc.stderr, proc.stderr
    garbled = tmp_path / "garbled.json"
    garbled.write_text('{"type": "service_account", "private_key": "-----BEGIN PRIV')
    proc = run(["ls", *FAST, "gs://b/k.tar"], env=env(GOOGLE_APPLICATION_CREDENTIALS=str(garbled)))
    assert proc.returncode == 1 and 'not a JSON object with a "type"' in proc.stderr, proc.stderr
    assert "BEGIN PRIV" not in proc.stderr


def test_gcs_token_endpoint_down(run, shards):
    port = free_port()
    start = time.monotonic()
    proc = run(["ls", *FAST, "gs://gbkt/train/shard-0.tar"],
               env=env(GCE_METADATA_HOST=f"127.0.0.1:{port}", NO_GCE_CHECK=""))
    assert proc.returncode == 1
    assert f"gs://gbkt/train/shard-0.tar: metadata server http://127.0.0.1:{port}" \
        in proc.stderr and "no answer" in proc.stderr and "(4 attempts)" in proc.stderr, \
        proc.stderr
    assert time.monotonic() - start < 60


def test_gcs_bad_jwt_signature_is_refused(run, shards, tmp_path, rsa_key):
    """The token endpoint really checks the signature: a key file whose
    private key is not the account's gets invalid_grant, named."""
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with Issuer(rsa_key) as issuer:
        path, _ = key_file(tmp_path, other, issuer)
        proc = run(["ls", *FAST, "gs://gbkt/train/shard-0.tar"],
                   env=env(GOOGLE_APPLICATION_CREDENTIALS=str(path)))
        assert issuer.log == [("jwt", False)]
    assert proc.returncode == 1
    assert "service account trainer@proj.iam.gserviceaccount.com" in proc.stderr
    assert "HTTP 400: invalid_grant (Invalid JWT Signature.)" in proc.stderr, proc.stderr


# -------------------------------------------------------------------- S3

def process_script(tmp_path, text):
    script = tmp_path / "creds helper.py"  # a space in the path: quoted in the profile
    script.write_text(text)
    return f'{sys.executable} "{script}"'


def profile_files(tmp_path, issuer, extra=""):
    """The shared files as the AWS CLI reads them: [profile x] sections in
    the config file, [x] in the credentials file, comments, a continued
    value, keys in mixed case."""
    helper = process_script(tmp_path, "import json, sys, urllib.request\n"
                            "data = json.dumps(sys.argv[2:]).encode()\n"
                            "print(urllib.request.urlopen(sys.argv[1], data=data).read().decode())\n")
    config = tmp_path / "aws-config"
    config.write_text(
        "# shared config\n[default]\nregion = ap-south-1\n\n"
        "[profile train]\nrole_arn = " + ROLE + "\nsource_profile = base\nregion = eu-west-3\n"
        "role_session_name = trainer-1\ns3 =\n    max_concurrent_requests = 20\n"
        "[sso-session corp]\nsso_region = us-east-1\n"
        f"[profile batch]\n; refreshed by a helper\nCredential_Process = {helper} "
        f"{issuer.url}/process 'two words' \"$HOME;x\" it\\'s\n" + extra)
    creds = tmp_path / "aws-credentials"
    creds.write_text(f"[base]\naws_access_key_id = {SOURCE_KEY_ID}\n"
                     f"aws_secret_access_key = {SOURCE_SECRET}\n")
    return config, creds


def s3_sources(issuer, tmp_path):
    token_file = tmp_path / "web-token"
    token_file.write_text(WEB_TOKEN + "\n")
    auth_file = tmp_path / "container-token"
    auth_file.write_text(CONTAINER_TOKEN)
    config, creds = profile_files(tmp_path, issuer)
    profiles = dict(AWS_CONFIG_FILE=str(config), AWS_SHARED_CREDENTIALS_FILE=str(creds))
    return {
        "assume-role": ("assume-role", dict(AWS_PROFILE="train",
                                            AWS_ENDPOINT_URL_STS=issuer.url + "/sts/", **profiles)),
        "process": ("process", dict(AWS_PROFILE="batch", **profiles)),
        "imds": ("imds", dict(AWS_EC2_METADATA_DISABLED="",
                              AWS_EC2_METADATA_SERVICE_ENDPOINT=issuer.url + "/")),
        "web-identity": ("sts", dict(AWS_WEB_IDENTITY_TOKEN_FILE=str(token_file),
                                     AWS_ROLE_ARN=ROLE, AWS_ENDPOINT_URL_STS=issuer.url + "/sts/")),
        "container": ("container", dict(
            AWS_CONTAINER_CREDENTIALS_FULL_URI=issuer.url + "/container-creds",
            AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(auth_file))),
    }


@pytest.mark.parametrize("source", ["imds", "web-identity", "container", "assume-role",
                                    "process"])
def test_s3_temporary_credentials(run, bench_json, shards, tmp_path, rsa_key, source):
    # The profile's region signs both STS and S3 requests when the
    # environment names none.
    region = "eu-west-3" if source == "assume-role" else "us-east-1"
    with Issuer(rsa_key) as issuer, \
            SigV4Server("bkt", objects(shards), token="", issuer=issuer, region=region) as s3:
        what, extra = s3_sources(issuer, tmp_path)[source]
        e = env(AWS_ENDPOINT_URL=s3.endpoint, **extra)
        got = ls(run, ["-v", *urls("s3")], e)
        assert got.stdout == ls(run, shards, e).stdout
        assert issuer.count(what) == 1 and all(ok for _, ok in issuer.log), issuer.log
        assert s3.requests and all(r["ok"] for r in s3.requests), s3.requests
        label = {"imds": "EC2 instance metadata (IMDSv2) " + issuer.url + ", role train-role",
                 "web-identity": f"web identity ($AWS_WEB_IDENTITY_TOKEN_FILE {tmp_path}",
                 "container": "container credentials " + issuer.url,
                 "assume-role": f"role {ROLE} of profile [train] ({tmp_path}/aws-config), "
                                "source_profile [base], via STS at " + issuer.url,
                 "process": f"credential_process of profile [batch] ({tmp_path}/aws-config)"
                 }[source]
        assert f"stoker ls: s3:// credentials: {label}" in got.stderr, got.stderr
        assert_no_secret(got, WEB_TOKEN, CONTAINER_TOKEN, SOURCE_SECRET, *issuer.issued,
                         *s3.signatures)
        # No region in the environment: STS is asked in the profile's region.
        assert issuer.sts_regions == (["eu-west-3"] if source == "assume-role" else [])
        report = bench_json(["--threads", "2", *FAST, *urls("s3")], env=e)
        assert report["samples"] == 12 * N_SHARDS and report["cred_refreshes"] == 1


def test_s3_container_token_checked(run, shards, tmp_path, rsa_key):
    with Issuer(rsa_key) as issuer:
        e = env(AWS_CONTAINER_CREDENTIALS_FULL_URI=issuer.url + "/container-creds",
                AWS_CONTAINER_AUTHORIZATION_TOKEN="wrong-token")
        proc = run(["ls", *FAST, urls("s3")[0]], env=e)
    assert proc.returncode == 1 and issuer.log == [("container", False)]
    assert "container credentials" in proc.stderr and "HTTP 401" in proc.stderr
    assert_no_secret(proc, "wrong-token")


def test_s3_clock_skew(run, shards, rsa_key):
    """IMDS hands out credentials whose Expiration is already past by this
    host's clock: a clear error naming the clock, not a fetch loop."""
    with Issuer(rsa_key, skew_s=-7200) as issuer:
        proc = run(["ls", *FAST, urls("s3")[0]],
                   env=env(AWS_EC2_METADATA_DISABLED="",
                           AWS_EC2_METADATA_SERVICE_ENDPOINT=issuer.url))
        assert issuer.count("imds") == 1
    assert proc.returncode == 1
    assert "EC2 instance metadata (IMDSv2)" in proc.stderr and "clock skew" in proc.stderr, \
        proc.stderr
    assert_no_secret(proc, *issuer.issued)


def test_no_source_found_names_what_was_tried(run, shards):
    with SigV4Server("bkt", objects(shards), secret="s") as s3:
        proc = run(["ls", *FAST, urls("s3")[0]], env=env(AWS_ENDPOINT_URL=s3.endpoint))
        assert len(s3.requests) == 1  # no credentials to renew: no second request
    assert proc.returncode == 1
    assert "HTTP 403" in proc.stderr and "credentials: no credentials (tried the environment, " \
        "web identity, the shared credentials and config files, container credentials" in proc.stderr, \
        proc.stderr


def revoke_first_keys(issuer):
    """The issuer no longer knows the first keys it handed out (revoked
    while valid): requests signed with them are refused, later keys work."""
    original, seen = issuer.lookup, set()

    def lookup(key_id):
        seen.add(key_id)
        return None if len(seen) == 1 else original(key_id)
    issuer.lookup = lookup


def test_refused_temporary_credentials_are_replaced_once(run, shards, tmp_path, rsa_key):
    """Credentials revoked while valid (a 403 to them): one new fetch and
    one retry, and the shard reads through."""
    with Issuer(rsa_key) as issuer, \
            SigV4Server("bkt", objects(shards), token="", issuer=issuer) as s3:
        what, extra = s3_sources(issuer, tmp_path)["imds"]
        e = env(AWS_ENDPOINT_URL=s3.endpoint, **extra)
        revoke_first_keys(issuer)
        assert ls(run, [urls("s3")[0]], e).stdout == ls(run, [shards[0]], e).stdout
        assert issuer.count("imds") == 2
        assert [r["ok"] for r in s3.requests] == [False, True]


def test_listing_refused_temporary_credentials_are_replaced_once(run, shards, tmp_path,
                                                                 rsa_key):
    """A prefix listing (s3://bkt/train/) whose first page is refused to
    credentials revoked while valid: one new fetch, the page asked again,
    and the listing and its shards read through."""
    with Issuer(rsa_key) as issuer, \
            SigV4Server("bkt", objects(shards), token="", issuer=issuer) as s3:
        what, extra = s3_sources(issuer, tmp_path)["imds"]
        e = env(AWS_ENDPOINT_URL=s3.endpoint, **extra)
        revoke_first_keys(issuer)
        assert ls(run, ["s3://bkt/train/"], e).stdout == ls(run, shards, e).stdout
        assert issuer.count("imds") == 2
        assert [r["ok"] for r in s3.requests][:2] == [False, True], s3.requests
        assert all("list-type=2" in r["query"] for r in s3.requests[:2])
        assert all(r["ok"] for r in s3.requests[1:])


def test_listing_refused_static_keys_not_retried(run, shards):
    """Static keys refused on a listing: one request, and the error names
    the prefix and where the keys came from."""
    with SigV4Server("bkt", objects(shards), secret="right") as s3:
        proc = run(["ls", *FAST, "s3://bkt/train/"],
                   env=env(AWS_ENDPOINT_URL=s3.endpoint, AWS_ACCESS_KEY_ID="AKIDEXAMPLE",
                           AWS_SECRET_ACCESS_KEY="wrong-secret"))
        assert len(s3.requests) == 1
    assert proc.returncode == 1
    assert "s3://bkt/train/" in proc.stderr and "HTTP 403" in proc.stderr
    assert "credentials: $AWS_ACCESS_KEY_ID" in proc.stderr, proc.stderr
    assert_no_secret(proc, "wrong-secret")


def test_profile_comes_before_container_credentials(run, shards, tmp_path, rsa_key):
    """The AWS SDKs' order: web identity, then the profile (here its
    credential_process), then container credentials."""
    with Issuer(rsa_key) as issuer, \
            SigV4Server("bkt", objects(shards), token="", issuer=issuer) as s3:
        sources = s3_sources(issuer, tmp_path)
        e = env(AWS_ENDPOINT_URL=s3.endpoint, **sources["process"][1], **sources["container"][1])
        ls(run, [urls("s3")[0]], e)
        assert issuer.count("process") == 1 and issuer.count("container") == 0, issuer.log
        e.update(sources["web-identity"][1])
        ls(run, [urls("s3")[0]], e)
        assert issuer.count("sts") == 1 and issuer.count("process") == 1, issuer.log


def test_assume_role_chain_signed_with_temporary_keys(run, shards, tmp_path, rsa_key):
    """role_arn chained: [profile top] takes its source from [profile mid],
    a role whose source_profile is itself (its own static keys, as the SDKs
    allow). The second AssumeRole is signed with the first one's temporary
    keys, session token included and signed."""
    config = tmp_path / "config"
    config.write_text(f"[profile top]\nrole_arn = {ROLE}\nsource_profile = mid\n"
                      "role_session_name = trainer-1\n"
                      f"[profile mid]\nrole_arn = {ROLE}\nsource_profile = mid\n"
                      "role_session_name = trainer-1\n"
                      f"aws_access_key_id = {SOURCE_KEY_ID}\naws_secret_access_key = {SOURCE_SECRET}\n")
    with Issuer(rsa_key) as issuer, \
            SigV4Server("bkt", objects(shards), token="", issuer=issuer) as s3:
        e = env(AWS_ENDPOINT_URL=s3.endpoint, AWS_CONFIG_FILE=str(config), AWS_PROFILE="top",
                AWS_ENDPOINT_URL_STS=issuer.url + "/sts/", AWS_REGION="us-east-1")
        got = ls(run, ["-v", urls("s3")[0]], e)
        assert got.stdout == ls(run, [shards[0]], e).stdout
        assert issuer.log == [("assume-role", True), ("assume-role", True)], issuer.log
        assert all(r["ok"] for r in s3.requests)
        assert "role " + ROLE + " of profile [top]" in got.stderr, got.stderr
        assert_no_secret(got, SOURCE_SECRET, *issuer.issued)


def test_profile_role_errors_name_the_profile(run, shards, tmp_path):
    config = tmp_path / "config"
    config.write_text(f"[profile ec2]\nrole_arn = {ROLE}\ncredential_source = Ec2InstanceMetadata\n"
                      f"[profile bare]\nrole_arn = {ROLE}\n"
                      f"[profile nosrc]\nrole_arn = {ROLE}\nsource_profile = ghost\n")
    broken = tmp_path / "broken"  # a malformed file fails every profile, as in the AWS CLI
    broken.write_text("[profile broken]\nregion = x\nnot a key\n")
    expect = {"ec2": "profile [ec2] (" + str(config) + "): role_arn with credential_source is "
                     "not supported",
              "bare": "profile [bare] (" + str(config) + "): role_arn without source_profile",
              "nosrc": "no profile [ghost] in the AWS credentials file",
              "broken": f"AWS config file {broken}, line 3: neither a [section], a key = value "
                        "nor a comment"}
    for profile, needle in expect.items():
        proc = run(["ls", *FAST, urls("s3")[0]],
                   env=env(AWS_CONFIG_FILE=str(broken if profile == "broken" else config),
                           AWS_PROFILE=profile))
        assert proc.returncode == 1 and needle in proc.stderr, (profile, proc.stderr)


def test_credential_process_failures_name_profile_and_status(run, shards, tmp_path, rsa_key):
    """A helper that fails: the error names the profile and file, the
    program's exit status and the first line of its standard error, and
    shows nothing it printed on standard output. One that prints more than
    64 KiB, or JSON of another Version, is refused by name."""
    failing = process_script(tmp_path, "import sys\nprint('AKIDLEAKED secret-on-stdout')\n"
                             "sys.stderr.write('token broker: login required\\nsecond line\\n')\n"
                             "sys.exit(3)\n")
    config = tmp_path / "config"
    config.write_text(f"[profile fails]\ncredential_process = {failing}\n"
                      f"[profile chatty]\ncredential_process = {sys.executable} -c "
                      "\"print('x' * 100000)\"\n"
                      f"[profile v2]\ncredential_process = {sys.executable} -c "
                      "'print(\"{\\\"Version\\\": 2}\")'\n"
                      "[profile missing]\ncredential_process = /nonexistent/helper --flag\n"
                      "[profile loop]\nrole_arn = " + ROLE + "\nsource_profile = loop2\n"
                      "[profile loop2]\nrole_arn = " + ROLE + "\nsource_profile = loop\n")
    expect = {
        "fails": ["credential_process of profile [fails] (" + str(config) + ")",
                  "exited with status 3: token broker: login required"],
        "chatty": ["credential_process of profile [chatty]", "printed more than 65536 bytes"],
        "v2": ["credential_process of profile [v2]", "unsupported Version (supported: 1)"],
        "missing": ["credential_process of profile [missing]",
                    "cannot run /nonexistent/helper: No such file"],
        "loop": ["profile [loop", "chain is longer than 8 profiles"],
    }
    for profile, needles in expect.items():
        proc = run(["ls", *FAST, urls("s3")[0]],
                   env=env(AWS_CONFIG_FILE=str(config), AWS_PROFILE=profile))
        assert proc.returncode == 1, (profile, proc.stderr)
        for needle in needles:
            assert needle in proc.stderr, (profile, proc.stderr)
        assert "second line" not in proc.stderr
        assert_no_secret(proc, "secret-on-stdout", "AKIDLEAKED")


# ------------------------------------------------------------- long run

def test_long_run_refreshes_before_every_expiry(run, bench_json, shards, rsa_key):
    """Credentials that live 3 s, two epochs of 6 s or more (a slow link) over
    gs:// (metadata server) and s3:// (IMDSv2): every request is accepted
    (refreshed before expiry, never after a 401/403), the samples equal a
    local epoch, and stats count the refreshes."""
    with Issuer(rsa_key, life_s=3) as issuer, \
            SigV4Server("gbkt", objects(shards), auth="bearer", issuer=issuer) as gcs, \
            SigV4Server("bkt", objects(shards), token="", issuer=issuer) as s3, \
            DelayProxy(gcs.port, delay_s=0, rate=300_000) as gslow, \
            DelayProxy(s3.port, delay_s=0, rate=300_000) as sslow:
        e = env(GCE_METADATA_HOST=f"127.0.0.1:{issuer.port}", NO_GCE_CHECK="",
                STOKER_GCS_ENDPOINT=f"http://127.0.0.1:{gslow.port}",
                AWS_EC2_METADATA_DISABLED="", AWS_EC2_METADATA_SERVICE_ENDPOINT=issuer.url,
                AWS_ENDPOINT_URL=f"http://127.0.0.1:{sslow.port}")
        args = ["--threads", "2", "--shards-in-flight", "1", "--no-shuffle", "--epochs", "2",
                *FAST]
        local = bench_json([*args, *shards], env=e)
        for scheme in ("gs", "s3"):
            start = time.monotonic()
            got = bench_json([*args, *urls(scheme, "gbkt" if scheme == "gs" else "bkt")], env=e)
            took = time.monotonic() - start
            assert got["samples"] == local["samples"] == 2 * 12 * N_SHARDS
            assert got["member_bytes"] == local["member_bytes"]
            # The link's pace makes the epoch outlast several lifetimes (load
            # only makes it longer); shards opened after an expiry fetched anew.
            assert took > 2 * 3 and got["cred_refreshes"] >= 3, (took, got["cred_refreshes"])
        assert all(r["ok"] for r in gcs.requests + s3.requests), \
            [r for r in gcs.requests + s3.requests if not r["ok"]]
        assert len(gcs.requests) >= 2 * N_SHARDS and len(s3.requests) >= 2 * N_SHARDS


class SlowFirstShard(SigV4Server):
    """Answers shard-0 only after `pause` seconds."""

    pause = 8.0

    def handle(self, h):
        if h.path.endswith("/shard-0.tar"):
            time.sleep(self.pause)
        super().handle(h)


@pytest.mark.parametrize("source", ["imds", "process", "assume-role"])
def test_refresh_comes_before_expiry_not_after(run, shards, tmp_path, rsa_key, source):
    """Credentials living 10 s; shard-1 opens about 8.5 s after they were
    fetched, within their last quarter but before they expire: they are
    renewed then (ahead of expiry), not used to the last second. (Under
    heavy load shard-1 may open after the expiry, which renews as well.)
    The same for a credential_process's Expiration and an assumed role's."""
    region = "eu-west-3" if source == "assume-role" else "us-east-1"
    with Issuer(rsa_key, life_s=10) as issuer, \
            SlowFirstShard("bkt", objects(shards), token="", issuer=issuer, region=region) as s3:
        what, extra = s3_sources(issuer, tmp_path)[source]
        e = env(AWS_ENDPOINT_URL=s3.endpoint, **extra)
        got = run(["ls", "--io-timeout-ms", "30000", *urls("s3")[:2]], env=e)
        assert got.returncode == 0, got.stderr
        assert got.stdout == ls(run, shards[:2], e).stdout
        assert issuer.count(what) == 2 and all(ok for _, ok in issuer.log), issuer.log
        assert all(r["ok"] for r in s3.requests)
