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
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
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

class FaultServer:
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

    requests: (mode, name, range header or None) per request.
    """

    def __init__(self, files, stall_s=5.0, fails=2):
        self.files = files
        self.stall_s = stall_s
        self.fails = fails
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

    def __enter__(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.handle(self)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # clients hanging up on purpose are part of the tests

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=START_TIMEOUT_S)

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

    def __init__(self, target_port, delay_s=0.05):
        self.target_port = target_port
        self.delay_s = delay_s
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
            for a, b in ((client, upstream), (upstream, client)):
                self._pump(a, b)

    def _pump(self, src, dst):
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
                    dst.sendall(data)
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
