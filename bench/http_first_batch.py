#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Where the time of a fresh first batch over http goes (issue 35).

bench/first_batch.py times the first batch over nginx behind a proxy that
adds --delay-ms each way; this takes that figure apart. In alternating
rounds, stoker defaults' fresh first batch (the whole sample set read, as
the shuffle window needs it) from
  local        the shards on disk (page cache warm);
  nginx        nginx directly, no proxy: what HTTP itself costs stoker;
  proxy D ms   nginx behind the same proxy (tests/integration/servers.py,
               DelayProxy) adding D ms each way, for each --delays-ms:
               0 ms is the proxy's own cost, and the growth with D counts
               the round trips a reader waits in series (a reader that
               asked for the next range only after consuming the last
               would wait one per chunk);
and "one batch alone" (an unshuffled loader on one local shard, as in
first_batch.py). For each: seconds, when the last byte was in (bytes_read
sampled every 10 ms), CPU seconds of this process and of the proxy (which
runs in a process of its own so that its CPU can be told apart), GET
requests in nginx's log and bytes read. Then curl(1) fetching 1 and every
shard at once, from nginx and through the proxy: the link's own
throughput, without stoker.

usage: bench/http_first_batch.py [--rounds 3] [--threads 2] [--batch-size 64]
           [--delays-ms 0,50,250] [--delay-ms 50] SHARD...
"""
import argparse
import collections
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from servers import DelayProxy, Nginx  # noqa: E402


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def serve_proxy(target_port, delay_s):
    """--proxy mode: a DelayProxy whose port goes to stdout; each line read
    from stdin is answered with this process's CPU seconds so far."""
    with DelayProxy(target_port, delay_s=delay_s) as proxy:
        print(proxy.port, flush=True)
        for _ in sys.stdin:
            print(f"{cpu_s():.4f}", flush=True)


class ProxyProcess:
    def __init__(self, target_port, delay_ms):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--proxy", str(target_port), str(delay_ms / 1000)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())

    def cpu(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def first_batch(urls, a, seed, **options):
    """(seconds, seconds to the last byte read, CPU seconds, bytes read)."""
    import stoker
    c, t = cpu_s(), time.monotonic()
    loader = stoker.Loader(urls, batch_size=a.batch_size, image_size=224, seed=seed,
                           threads=a.threads, **options)
    marks, done = [], threading.Event()

    def sample():
        while not done.wait(0.01):
            marks.append((time.monotonic() - t, loader.stats()["bytes_read"]))

    sampler = threading.Thread(target=sample)
    sampler.start()
    next(iter(loader))
    took, used = time.monotonic() - t, cpu_s() - c
    done.set()
    sampler.join()
    read = loader.stats()["bytes_read"]
    loader.close()
    last = next((m for m, b in marks if b >= read), took)
    return took, min(last, took), used, read


def curl(urls):
    t = time.monotonic()
    procs = [subprocess.Popen(["curl", "-sf", "-o", "/dev/null", u]) for u in urls]
    if any(p.wait(timeout=120) != 0 for p in procs):
        sys.exit("http_first_batch: curl failed")
    return time.monotonic() - t


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--proxy":
        return serve_proxy(int(sys.argv[2]), float(sys.argv[3]))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--delays-ms", default="0,50,250", help="each way, one proxy each")
    ap.add_argument("--delay-ms", type=float, default=50.0, help="each way, for curl")
    ap.add_argument("shards", nargs="+")
    a = ap.parse_args()
    delays = sorted({float(d) for d in a.delays_ms.split(",")} | {a.delay_ms})
    shards = [Path(s).resolve() for s in a.shards]
    root = shards[0].parent
    if any(s.parent != root for s in shards):
        sys.exit("http_first_batch: the shards must be in one directory")
    total = sum(s.stat().st_size for s in shards)
    for s in shards:  # warm the page cache
        s.read_bytes()
    tmp = Path(tempfile.mkdtemp(prefix="stk-http-first-"))
    rows = collections.defaultdict(list)  # name -> [(s, last byte s, cpu, proxy cpu, GETs, bytes)]
    proxies = {}
    try:
        with Nginx(root, tmp / "nginx") as nginx:
            for d in delays:
                proxies[d] = ProxyProcess(nginx.port, d)
            where = {"local": ([str(s) for s in shards], None),
                     "nginx": ([nginx.url(s.name) for s in shards], None)}
            for d in delays:
                port = proxies[d].port
                where[f"proxy {d:g} ms"] = (
                    [f"http://127.0.0.1:{port}/{s.name}" for s in shards], proxies[d])
            for r in range(a.rounds):
                took, last, used, read = first_batch([str(shards[0])], a, r, shuffle=False,
                                                     shards_in_flight=1)
                rows["one batch alone"].append((took, last, used, 0, 0, read))
                for name, (urls, proxy) in where.items():
                    nginx.clear_log()
                    p0 = proxy.cpu() if proxy else 0
                    took, last, used, read = first_batch(urls, a, r)
                    p1 = proxy.cpu() if proxy else 0
                    gets = sum(1 for e in nginx.access_log() if e[0] == "GET")
                    rows[name].append((took, last, used, p1 - p0, gets, read))
                for n in (1, len(shards)):
                    for name, base, proxy in (
                            ("nginx", nginx.url(""), None),
                            (f"proxy {a.delay_ms:g} ms",
                             f"http://127.0.0.1:{proxies[a.delay_ms].port}/",
                             proxies[a.delay_ms])):
                        p0 = proxy.cpu() if proxy else 0
                        took = curl([base + s.name for s in shards[:n]])
                        p1 = proxy.cpu() if proxy else 0
                        size = sum(s.stat().st_size for s in shards[:n])
                        rows[f"curl, {n} conn, {name}"].append((took, took, 0, p1 - p0, n, size))
                print(f"round {r + 1} done", flush=True)
    finally:
        for proxy in proxies.values():
            proxy.close()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: [statistics.median(x[i] for x in v) for i in range(6)] for k, v in rows.items()}
    alone = med["one batch alone"][0]
    print(f"\n{len(shards)} shards, {total / 1e6:.0f} MB, batch {a.batch_size}, {a.threads} "
          f"threads; medians of {a.rounds} rounds (min-max of seconds):")
    print(f"{'':32s} {'seconds':>8s} {'range':>13s} {'/ alone':>7s} {'last byte':>9s} "
          f"{'cpu s':>6s} {'proxy cpu':>9s} {'GETs':>5s} {'MB':>6s} {'MB/s':>6s}")
    for k, (took, last, used, pcpu, gets, read) in med.items():
        ts = [x[0] for x in rows[k]]
        print(f"{k:32s} {took:8.3f} {min(ts):6.3f}-{max(ts):6.3f} {took / alone:7.2f} "
              f"{last:9.3f} {used:6.2f} {pcpu:9.2f} {gets:5.0f} {read / 1e6:6.1f} "
              f"{read / 1e6 / last:6.0f}")
    lo, hi = min(delays), max(delays)
    if hi > lo:
        extra = med[f"proxy {hi:g} ms"][0] - med[f"proxy {lo:g} ms"][0]
        print(f"round trips waited in series: ({extra:.3f} s from {2 * lo:g} to {2 * hi:g} ms "
              f"round trip) / {2 * (hi - lo) / 1000:g} s = {extra / (2 * (hi - lo) / 1000):.1f}")


if __name__ == "__main__":
    main()
