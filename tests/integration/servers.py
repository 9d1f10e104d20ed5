# SPDX-License-Identifier: MIT
"""Real servers for the remote-source tests and benchmarks, all on 127.0.0.1.

Nginx        an nginx of our own (own prefix, config, port and access log),
             serving a directory; `daemon off` as a child process.
FaultServer  a threaded HTTP/1.1 server that misbehaves on purpose: drops the
             connection mid-body, answers 5xx/429 before recovering, sends a
             short body with the full Content-Length, stalls, ignores Range,
             refuses (403/404). Every request is recorded.
DelayProxy   a TCP proxy adding a fixed delay in each direction, to put a
             wide-area round trip between stoker and a local server.

Each class is a context manager and cleans up after itself (bench/ imports
this module too).
"""
import http.server
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")
START_TIMEOUT_S = 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc=None, timeout=START_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


# --------------------------------------------------------------------------

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 512; }}
http {{
    log_format stoker '$request_method $uri $status $body_bytes_sent "$http_range" $connection';
    access_log {prefix}/access.log stoker;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    types {{ application/x-tar tar; }}
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    server {{
        listen 127.0.0.1:{port}{ssl};
        {ssl_files}
        root {root};
        location / {{ }}
    }}
}}
"""


class Nginx:
    """nginx serving `root` on 127.0.0.1:port; access_log() lists the
    requests as (method, uri, status, bytes, range, connection number)."""

    def __init__(self, root, prefix, tls=None):
        """tls: (certificate, key) PEM paths to serve https instead."""
        self.root = Path(root).resolve()
        self.prefix = Path(prefix).resolve()
        self.tls = tls
        self.proc = None
        self.port = None

    def __enter__(self):
        (self.prefix / "tmp").mkdir(parents=True, exist_ok=True)
        for attempt in range(5):
            self.port = free_port()
            conf = self.prefix / "nginx.conf"
            ssl_files = (f"ssl_certificate {self.tls[0]}; ssl_certificate_key {self.tls[1]};"
                         if self.tls else "")
            conf.write_text(NGINX_CONF.format(prefix=self.prefix, port=self.port, root=self.root,
                                              ssl=" ssl" if self.tls else "",
                                              ssl_files=ssl_files))
            self.proc = subprocess.Popen(
                [NGINX, "-p", str(self.prefix), "-c", str(conf), "-e",
                 str(self.prefix / "error.log")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if wait_for_port(self.port, self.proc):
                return self
            self.stop()
        err = (self.prefix / "error.log").read_text() if (self.prefix / "error.log").exists() else ""
        raise RuntimeError(f"nginx did not start: {err}")

    def url(self, name):
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/{name}"

    def access_log(self):
        path = self.prefix / "access.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            m = re.match(r'^(\S+) (\S+) (\d+) (\d+) "(.*)" (\d+)$', line)
            if m:
                out.append((m[1], m[2], int(m[3]), int(m[4]), m[5], int(m[6])))
        return out

    def clear_log(self):
        # nginx keeps the file open; truncating it in place is seen at once.
        path = self.prefix / "access.log"
        if path.exists():
            with open(path, "r+") as f:
                f.truncate(0)

    def stop(self):
        stop_process(self.proc)
        self.proc = None

    def __exit__(self, *exc):
        self.stop()


def self_signed_certificate(directory):
    """(certificate, key) for 127.0.0.1, made with openssl(1)."""
    cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


# --------------------------------------------------------------------------

def stop_process(proc):
    """Terminate a server process (kill it if it lingers) and close its
    stderr pipe; None or an exited process is fine."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def serve_in_thread(handle):
    """A threaded HTTP/1.1 server on 127.0.0.1 (a free port) that passes
    every GET to handle(request_handler); returns (server, thread)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            handle(self)

        # Credential endpoints (token exchange, STS, IMDSv2's session token).
        do_POST = do_PUT = do_GET

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # clients hanging up on purpose are part of the tests

    httpd = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return httpd, thread


def stop_server(httpd, thread):
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=START_TIMEOUT_S)


class ServedInThread:
    """Context manager for the Python test servers: serves self.handle on
    127.0.0.1 from a thread and sets self.port."""

    def __enter__(self):
        self.httpd, self.thread = serve_in_thread(self.handle)
        self.port = self.httpd.server_address[1]
        return self

    def __exit__(self, *exc):
        stop_server(self.httpd, self.thread)


class FaultServer(ServedInThread):
    """Serves files[name] at /MODE/name, misbehaving by MODE:

      ok          a correct server (Range honoured, 206 + Content-Range)
      drop        1st request: half the body, then a TCP reset
      trunc       1st request: a third of the body with the full
                  Content-Length, then a clean close (short body)
      dropall     every request: at most 40% of the file, then a close
      stall       1st request: half the body, then silence for stall_s
      e500, e503, e429
                  the first `fails` requests answer that status, then ok
      always503   every request answers 503
      norange     ignores Range (200 + whole body); 1st request drops mid-body
      badrange    206 starting at the wrong offset on resume; 1st drops
      403, 404    refuse every request
      drip        every request: headers at once, then one byte every drip_s
                  seconds (a link that never stalls and never delivers)
      slow        every request: slow_chunk bytes every slow_s seconds

    requests: (mode, name, range header or None) per request.
    """

    def __init__(self, files, stall_s=5.0, fails=2, drip_s=0.5, slow_chunk=16384, slow_s=0.02):
        self.files = files
        self.stall_s = stall_s
        self.fails = fails
        self.drip_s = drip_s
        self.slow_chunk, self.slow_s = slow_chunk, slow_s
        self.requests = []
        self.counts = {}
        self.lock = threading.Lock()
        self.httpd = None
        self.thread = None

    def url(self, mode, name):
        return f"http://127.0.0.1:{self.port}/{mode}/{name}"

    def reset(self):
        """Forget past requests: every mode misbehaves again."""
        with self.lock:
            self.requests.clear()
            self.counts.clear()

    def handle(self, h):
        parts = h.path.split("/", 2)
        if len(parts) != 3:
            return self.status(h, 404, "Not Found")
        mode, name = parts[1], parts[2]
        rng = h.headers.get("Range")
        with self.lock:
            self.requests.append((mode, name, rng))
            n = self.counts.get((mode, name), 0)
            self.counts[(mode, name)] = n + 1
        data = self.files.get(name)
        if data is None or mode == "404":
            return self.status(h, 404, "Not Found")
        if mode == "403":
            return self.status(h, 403, "Forbidden")
        if mode == "always503":
            return self.status(h, 503, "Service Unavailable")
        if mode in ("e500", "e503", "e429") and n < self.fails:
            code = int(mode[1:])
            return self.status(h, code, {500: "Internal Server Error", 503: "Service Unavailable",
                                         429: "Too Many Requests"}[code])
        start = 0
        m = re.match(r"bytes=(\d+)-$", rng or "")
        if m and mode != "norange":
            start = int(m[1])
        if mode == "badrange" and start > 0:
            start -= 1
        body = data[start:]
        h.send_response(206 if m and mode != "norange" else 200)
        h.send_header("Content-Type", "application/x-tar")
        h.send_header("Content-Length", str(len(body)))
        if m and mode != "norange":
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        first = n == 0
        if first and mode in ("drop", "norange", "badrange"):
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    b"\x01\x00\x00\x00\x00\x00\x00\x00")
            h.close_connection = True
            return
        if first and mode == "trunc":
            h.wfile.write(body[:len(body) // 3])
            h.wfile.flush()
            h.close_connection = True
            return
        if mode == "dropall":
            h.wfile.write(body[:max(1, min(len(body), int(len(data) * 0.4)))])
            h.wfile.flush()
            h.close_connection = True
            return
        if mode in ("drip", "slow"):
            step, pause = (1, self.drip_s) if mode == "drip" else (self.slow_chunk, self.slow_s)
            for i in range(0, len(body), step):
                try:
                    h.wfile.write(body[i:i + step])
                    h.wfile.flush()
                except OSError:
                    return  # the client gave up
                time.sleep(pause)
            return
        if first and mode == "stall":
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            time.sleep(self.stall_s)
            h.close_connection = True
            return
        h.wfile.write(body)

    @staticmethod
    def status(h, code, reason):
        body = f"{code} {reason}\n".encode()
        h.send_response(code, reason)
        h.send_header("Content-Length", str(len(body)))
        if code in (429, 503):
            h.send_header("Retry-After", "0")
        h.end_headers()
        h.wfile.write(body)


# --------------------------------------------------------------------------

class DelayProxy:
    """Forwards 127.0.0.1:port to target_port, delaying every chunk by
    delay_s in each direction (a round trip of 2 * delay_s), without
    limiting bandwidth: chunks are timestamped on arrival and sent when due,
    so many can be in flight, as on a long fat pipe."""

    def __init__(self, target_port, delay_s=0.05, cut_after=None, rate=None):
        """cut_after: close every connection once it has carried this many
        bytes from the server (a network that drops long transfers).
        rate: bytes per second from the server, per connection (a thin
        link); None for no limit."""
        self.target_port = target_port
        self.delay_s = delay_s
        self.cut_after = cut_after
        self.rate = rate
        self.cuts = 0
        self.listener = None
        self.threads = []
        self.stopping = threading.Event()
        self.conns = []
        self.lock = threading.Lock()

    def __enter__(self):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)
        return self

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def _accept(self):
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            self._pump(client, upstream, None)
            self._pump(upstream, client, self.cut_after, self.rate)

    def _pump(self, src, dst, cut_after, rate=None):
        import collections
        queue = collections.deque()
        cond = threading.Condition()

        def reader():
            while True:
                try:
                    data = src.recv(1 << 18)
                except OSError:
                    data = b""
                with cond:
                    queue.append((time.monotonic() + self.delay_s, data))
                    cond.notify()
                if not data:
                    return

        def writer():
            sent = 0
            paced = None  # with a rate: when the bytes sent so far may have gone
            while True:
                with cond:
                    while not queue:
                        cond.wait()
                    due, data = queue.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    if cut_after is not None and sent + len(data) > cut_after:
                        dst.sendall(data[:cut_after - sent])
                        with self.lock:
                            self.cuts += 1
                        for sock in (dst, src):
                            sock.shutdown(socket.SHUT_RDWR)
                        return
                    if rate is None:
                        dst.sendall(data)
                    else:  # 16 KiB pieces, each when the link has carried the last
                        for i in range(0, len(data), 1 << 14):
                            piece = data[i:i + (1 << 14)]
                            now = time.monotonic()
                            paced = max(paced or now, now) + len(piece) / rate
                            dst.sendall(piece)
                            wait = paced - time.monotonic()
                            if wait > 0:
                                time.sleep(wait)
                    sent += len(data)
                except OSError:
                    return

        for fn in (reader, writer):
            t = threading.Thread(target=fn, daemon=True)
            t.start()
            self.threads.append(t)

    def __exit__(self, *exc):
        self.stopping.set()
        self.listener.close()
        with self.lock:
            for s in self.conns:
                try:
                    s.close()
                except OSError:
                    pass


# --------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
S3RVER_VERSION = "3.7.1"
S3RVER_PREFIX = REPO / "build-npm"  # git-ignored (/build*/); tools/install_deps.sh fills it


def s3rver_binary():
    """Path of the s3rver command, installed with npm into build-npm/ when
    missing. Raises RuntimeError saying why when it cannot be had (no npm,
    registry unreachable)."""
    binary = S3RVER_PREFIX / "node_modules" / ".bin" / "s3rver"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("s3rver is not installed and npm is missing: run tools/install_deps.sh")
    proc = subprocess.run([npm, "install", "--prefix", str(S3RVER_PREFIX), "--no-audit",
                           "--no-fund", f"s3rver@{S3RVER_VERSION}"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0 or not binary.exists():
        raise RuntimeError(f"cannot install s3rver@{S3RVER_VERSION} with npm (offline? the npm "
                           f"registry must be reachable once): {proc.stderr[-2000:]}")
    return binary


class S3rver:
    """s3rver (a Node.js S3 emulator) on 127.0.0.1 with the given buckets,
    credentials S3RVER/S3RVER. client() is a botocore S3 client for it."""

    KEY = SECRET = "S3RVER"

    def __init__(self, directory, buckets):
        self.directory = Path(directory)
        self.buckets = buckets
        self.proc = None
        self.port = None

    def __enter__(self):
        binary = s3rver_binary()
        env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
        for attempt in range(3):
            self.port = free_port()
            args = [str(binary), "-d", str(self.directory), "-a", "127.0.0.1", "-p",
                    str(self.port), "--silent"]
            for b in self.buckets:
                args += ["--configure-bucket", b]
            self.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if wait_for_port(self.port, self.proc):
                return self
            self.stop()
        raise RuntimeError("s3rver did not start")

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def client(self):
        import botocore.session
        return botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.KEY,
            aws_secret_access_key=self.SECRET, region_name="us-east-1")

    def stop(self):
        stop_process(self.proc)
        self.proc = None

    def __exit__(self, *exc):
        self.stop()


class SigV4Server(ServedInThread):
    """A strict object store for one bucket, on 127.0.0.1: path-style GET of
    objects (Range honoured) and ListObjectsV2 (max-keys, opaque
    continuation tokens), answering only requests it can authenticate.

    auth="sigv4": every request must carry an AWS4-HMAC-SHA256 Authorization
    header for (key_id, secret[, token]) in `region`/"s3" whose signature,
    recomputed with botocore's S3 signer from the method, raw path, raw query
    and the signed headers as received, matches; x-amz-content-sha256 (and
    x-amz-security-token with a token) must be present and signed, as S3
    requires. auth="bearer": "Authorization: Bearer <token>". Anything else
    gets 403 (sigv4) or 401 (bearer) with an S3-style XML error.

    drop_first: object keys whose first GET sends half the body and then
    resets the connection (the client must resume with Range).

    issuer: instead of one fixed key (or bearer token), accept the
    temporary credentials an issuer handed out, each until it expires:
    issuer.lookup(key_id) -> (secret, token) or None, issuer.bearer_ok(t).

    requests: dicts (method, path, query, range, ok, signature) per request;
    signatures: every signature value received.
    """

    EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    def __init__(self, bucket, objects, key_id="AKIDEXAMPLE", secret=None, token=None,
                 region="us-east-1", auth="sigv4", bearer=None, drop_first=(), issuer=None):
        self.bucket = bucket
        self.objects = dict(objects)
        self.key_id, self.secret, self.token = key_id, secret, token
        self.region, self.auth, self.bearer = region, auth, bearer
        self.drop_first = set(drop_first)
        self.issuer = issuer
        self.requests = []
        self.signatures = []
        self.gets = {}
        self.lock = threading.Lock()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    # -- authentication

    def verify_sigv4(self, h, path, query):
        import datetime
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        auth = h.headers.get("Authorization", "")
        m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,"
                     r"\s*SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$", auth)
        if not m:
            return "no AWS4-HMAC-SHA256 Authorization header", None
        key_id, day, region, service, signed, signature = m.groups()
        with self.lock:
            self.signatures.append(signature)
        secret, token, want_id = self.secret, self.token, self.key_id
        if self.issuer is not None:
            issued = self.issuer.lookup(key_id)
            if issued is None:
                return f"unknown or expired key {key_id}", signature
            secret, token, want_id = issued[0], issued[1], key_id
        signed = signed.split(";")
        amz_date = h.headers.get("x-amz-date", "")
        required = ["host", "x-amz-date", "x-amz-content-sha256"]
        if token is not None:
            required.append("x-amz-security-token")
        if key_id != want_id or region != self.region or service != "s3":
            return f"wrong credential scope {key_id}/{region}/{service}", signature
        if any(r not in signed for r in required) or signed != sorted(signed):
            return f"signed headers {signed} lack one of {required}", signature
        if h.headers.get("x-amz-content-sha256") not in (self.EMPTY_SHA256, "UNSIGNED-PAYLOAD"):
            return "bad x-amz-content-sha256", signature
        if token is not None and h.headers.get("x-amz-security-token") != token:
            return "wrong x-amz-security-token", signature
        try:
            when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(
                tzinfo=datetime.timezone.utc)
        except ValueError:
            return "bad x-amz-date", signature
        now = datetime.datetime.now(datetime.timezone.utc)
        if abs((now - when).total_seconds()) > 900 or amz_date[:8] != day:
            return "x-amz-date too far from now", signature
        url = f"http://{h.headers.get('Host')}{path}" + (f"?{query}" if query else "")
        request = AWSRequest(method=h.command, url=url,
                             headers={k: h.headers.get(k, "") for k in signed})
        request.context["timestamp"] = amz_date
        signer = S3SigV4Auth(Credentials(want_id, secret, token), "s3", self.region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if expected != signature:
            return "SignatureDoesNotMatch", signature
        return None, signature

    def authenticate(self, h, path, query):
        if self.auth == "bearer":
            got = h.headers.get("Authorization", "")
            if self.issuer is not None:
                ok = got.startswith("Bearer ") and self.issuer.bearer_ok(got[7:])
            else:
                ok = got == f"Bearer {self.bearer}"
            return (None if ok else "bad bearer token"), None
        return self.verify_sigv4(h, path, query)

    # -- requests

    def handle(self, h):
        from urllib.parse import parse_qsl, unquote
        path, _, query = h.path.partition("?")
        problem, signature = self.authenticate(h, path, query)
        record = {"method": h.command, "path": path, "query": query,
                  "range": h.headers.get("Range"), "ok": problem is None, "problem": problem}
        with self.lock:
            self.requests.append(record)
        if problem is not None:
            code = 401 if self.auth == "bearer" else 403
            return self.error(h, code, "AccessDenied" if code == 401 else "SignatureDoesNotMatch")
        parts = unquote(path).split("/", 2)
        if len(parts) < 2 or parts[1] != self.bucket:
            return self.error(h, 404, "NoSuchBucket")
        if len(parts) == 2 or parts[2] == "":
            return self.list(h, dict(parse_qsl(query, keep_blank_values=True)))
        key = parts[2]
        data = self.objects.get(key)
        if data is None:
            return self.error(h, 404, "NoSuchKey")
        with self.lock:
            n = self.gets.get(key, 0)
            self.gets[key] = n + 1
        start = 0
        m = re.match(r"bytes=(\d+)-$", h.headers.get("Range") or "")
        if m:
            start = int(m[1])
        body = data[start:]
        h.send_response(206 if m else 200)
        h.send_header("Content-Length", str(len(body)))
        if m:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if n == 0 and key in self.drop_first:
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    b"\x01\x00\x00\x00\x00\x00\x00\x00")
            h.close_connection = True
            return
        h.wfile.write(body)

    def list(self, h, q):
        import base64
        from xml.sax.saxutils import escape
        if q.get("list-type") != "2":
            return self.error(h, 400, "InvalidArgument")
        prefix = q.get("prefix", "")
        max_keys = int(q.get("max-keys", "1000"))
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        token = q.get("continuation-token")
        if token is not None:
            after = base64.b64decode(token.encode()).decode()[3:]
            keys = [k for k in keys if k > after]
        page, rest = keys[:max_keys], keys[max_keys:]
        xml = ['<?xml version="1.0" encoding="UTF-8"?>\n'
               '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
               f"<Name>{escape(self.bucket)}</Name><Prefix>{escape(prefix)}</Prefix>",
               f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>",
               f"<IsTruncated>{'true' if rest else 'false'}</IsTruncated>"]
        if rest:
            # Opaque, and full of characters that must be percent-encoded.
            nxt = base64.b64encode(("~/+" + page[-1]).encode()).decode()
            xml.append(f"<NextContinuationToken>{escape(nxt)}</NextContinuationToken>")
        for k in page:
            xml.append(f"<Contents><Key>{escape(k)}</Key><Size>{len(self.objects[k])}</Size>"
                       "<StorageClass>STANDARD</StorageClass></Contents>")
        xml.append("</ListBucketResult>")
        body = "".join(xml).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/xml")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    @staticmethod
    def error(h, code, s3_code):
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{s3_code}</Code>'
                "<Message>refused by the test server</Message></Error>").encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/xml")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
