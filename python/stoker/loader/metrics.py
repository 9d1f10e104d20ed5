# SPDX-License-Identifier: MIT
"""Figures over time and their export: TensorBoard scalars and a Prometheus
text endpoint (metric names: docs/metrics.md).

Both read Loader.stats(), a copy of the C loader's atomic counters, so
watching a loader costs one copy per step or per scrape and nothing on its
threads. Rates and busy shares come from stoker.rates() (stk_stats_rates in
C), the one computation the report and `stoker bench --plot` use too.

The node cache is served by the loader's endpoint, not by a server of its
own: Python holds no handle to the cache (each loader opens it inside C),
and its shared state is the directory itself, so the node figures are the
directory's files and bytes, read at each scrape, beside this loader's own
cache counters. A separate CLI daemon would add a process to run and a
port to manage for three numbers any loader on the node can read.
"""
import http.server
import math
import os
import socket
import threading

from .._ext._stoker import rates, stats_kinds

__all__ = ["rates", "tensorboard", "prometheus_text"]


def tensorboard(writer, loader, step):
    """Log the loader's throughput, the share of time the training loop
    waited for batches, each stage's busy share and the shuffle quality
    as scalars under "stoker/", over the interval since the previous call
    for this loader (since its start the first time), so a stall shows as
    a dip. writer is a torch.utils.tensorboard SummaryWriter or anything
    with its add_scalar(tag, value, step). Returns the rates logged."""
    now = loader.stats()
    before = getattr(loader, "_tensorboard_before", None)
    loader._tensorboard_before = now
    r = rates(now, before)
    if r["seconds"] == 0:
        return r  # no time has passed since the last call: no interval to show
    scalars = {
        "stoker/samples_per_s": r["samples_per_s"],
        "stoker/wait_share": r["wait_share"],
        "stoker/busy/read": r["read_busy"],
        "stoker/busy/batching": r["batching_busy"],
    }
    if now.get("decode_threads"):
        scalars["stoker/images_per_s"] = r["images_per_s"]
        scalars["stoker/busy/decode"] = r["decode_busy"]
    # k_eff is infinite when no two samples of a batch shared a shard and 0
    # without a batch of two: neither draws as a point.
    for key in ("shuffle_k_eff", "shuffle_k_perfect"):
        if 0 < r[key] < math.inf:
            scalars["stoker/" + key] = r[key]
    for tag, value in scalars.items():
        writer.add_scalar(tag, value, step)
    return r


# What each counter is (the kind column of the C library's stats table):
# "gauge" describes the loader (thread counts), "ns" is time, "count" events.
_KINDS = stats_kinds()


def _number(v):
    return "+Inf" if v == math.inf else repr(float(v)) if isinstance(v, float) else str(v)


def prometheus_text(stats, labels="", cache_dir=None, cache_size=0):
    """The Prometheus text exposition (version 0.0.4) of a stats() dict:
    every counter as stoker_NAME_total (times in ns as
    stoker_NAME_seconds_total), thread counts as gauges, the lifetime
    shuffle quality, and with cache_dir the node cache's size on disk.
    labels: the text inside {} that every sample gets (e.g. 'rank="0"')."""
    lines = []
    lab = "{" + labels + "}" if labels else ""

    def metric(name, kind, help_text, value):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name}{lab} {_number(value)}")

    for key, value in sorted(stats.items()):
        if not isinstance(value, int):
            continue  # e.g. the "cluster" breakdown of a Loader with cluster=
        kind = _KINDS.get(key, "count")
        if kind == "gauge":
            metric(f"stoker_{key}", "gauge", f"stats()['{key}']", value)
        elif kind == "ns":
            metric(f"stoker_{key[:-3]}_seconds_total", "counter", f"stats()['{key}'] / 1e9",
                   value / 1e9)
        else:
            metric(f"stoker_{key}_total", "counter", f"stats()['{key}']", value)
    r = rates(stats)
    for key in ("shuffle_k_eff", "shuffle_k_perfect"):
        metric(f"stoker_{key}", "gauge", f"stoker.rates(stats())['{key}'] since the start",
               r[key])
    if cache_dir is not None:
        files, size = _directory_size(cache_dir)
        metric("stoker_node_cache_bytes", "gauge",
               "bytes of the files in cache_dir, all processes of the node", size)
        metric("stoker_node_cache_files", "gauge", "files in cache_dir", files)
        metric("stoker_node_cache_capacity_bytes", "gauge", "cache_size", cache_size)
    return "\n".join(lines) + "\n"


def _directory_size(path):
    """Files and bytes in the cache directory (what cache_size bounds). A
    file removed while listed (an eviction) is skipped."""
    files = size = 0
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return 0, 0
    for e in entries:
        try:
            if e.is_file(follow_symlinks=False):
                files += 1
                size += e.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            pass
    return files, size


class _BoundedServer(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer with at most max_connections handler threads (a
    connection beyond them is answered 503 and closed at once, holding no
    thread) and a list of the connections open, so that close_connections()
    can end them: an idle client must not keep a thread and a descriptor
    after the server is closed."""

    daemon_threads = True
    block_on_close = False  # close_connections() joins the handlers itself
    request_queue_size = 64  # a burst waits in the backlog instead of retrying SYNs

    def __init__(self, address, handler, max_connections):
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._open = {}  # socket -> its handler thread
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            try:  # best effort: a full socket buffer must not block the accept loop
                request.setblocking(False)
                request.send(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        t = threading.Thread(target=self._serve, args=(request, client_address),
                             name="stoker-prometheus-conn", daemon=True)
        with self._lock:
            self._open[request] = t
        t.start()

    def _serve(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except OSError:
            pass  # the client went away, or close() ended the connection
        except Exception:  # noqa: BLE001 - as socketserver does: one bad client is not fatal
            self.handle_error(request, client_address)
        finally:
            with self._lock:
                self._open.pop(request, None)
            self.shutdown_request(request)
            self._slots.release()

    def close_connections(self, timeout):
        """Shut down every open connection (its handler then sees the end
        of the stream) and wait up to timeout seconds for the handlers."""
        with self._lock:
            open_now = list(self._open.items())
        for sock, _ in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # its handler closed it meanwhile
        for _, t in open_now:
            t.join(timeout)


class PrometheusServer:
    """GET /metrics on (host, port), answered from a callable that returns
    the exposition text.

    A Python thread with http.server, not a server in C: a scrape every few
    seconds is nothing for it; it holds the GIL only while it formats a few
    dozen lines, never while the loader's C threads work; and the C library
    keeps no socket, thread or port of its own that every caller would
    have to configure or turn off. Bound to 127.0.0.1 unless told
    otherwise: the figures name nothing secret, but a port open to the
    network is the operator's choice. port 0 takes a free port
    (self.port says which).

    A scraper needs one short connection at a time, so clients are held to
    that: each connection gets timeout seconds for every read and write
    (an idle or stuck client is closed then), at most max_connections are
    served at once (the rest get 503 and are closed at once, so a burst of
    idle connections cannot use up the process's threads or descriptors),
    and close() ends the connections still open."""

    def __init__(self, text, port, host="127.0.0.1", timeout=5.0, max_connections=8):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                try:
                    body = text().encode()
                except ValueError as e:  # the loader was closed
                    self.send_error(503, str(e))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass  # one line per scrape on stderr would drown the training log

        Handler.timeout = timeout  # applied to each connection's socket by StreamRequestHandler
        self._timeout = timeout
        self._server = _BoundedServer((host, port), Handler, max_connections)
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="stoker-prometheus", daemon=True)
        self._thread.start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections(self._timeout)
        self._thread.join()
