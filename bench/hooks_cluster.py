#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""User hooks offloaded to a Dask worker: does a CPU host add its core to
the trainer's, over a whole epoch, at the default options?

The seed's heavy workload: transform=None, and map= decodes the whole image
(in the hook process), then RandomResizedCrop 224 + flip and
GaussianBlur(11) ten times (torchvision,
bench/hooks_vs_dataloader.crop_blur10). Each round, alternating which goes
first:
  alone    the trainer pinned to one core (taskset): Loader(threads=1,
           transform=None, map=, hook_processes=1)
  cluster  the same Loader with cluster= and one dask-worker (1 thread, one
           hook process: STOKER_WORKER_THREADS=1) pinned to the other core,
           started with its nanny as the docs start it
Everything else at its default: batches of 64, the default shuffle, and
batches_per_task left to stoker (--batches-per-task N to compare a fixed
size). Give it 4 shards of the sample set: an epoch of 1,000 images, 16
batches. Per round it prints the samples read per sample delivered (both
sides) and the tasks and ranges sent to the worker.
The time is the whole epoch: from creating the Loader (its hook process
starting cold, and with the cluster the worker's, which the Loader has the
worker start) to the last batch, tail included; the trainer's imports
before it (torch, stoker, torchvision: the same in both modes, and in any
training script whatever its loader) are printed beside it. The worker
stands, as a cluster does before training starts (started once, stoker
preloaded), but each round has a seed of its own: a job of its own, whose
warm_hooks task starts the worker's fork server (importing torch while the
trainer's does the same; it stops when the worker's jobs have ended) and
hook process within the timed epoch too (forked, then importing
torchvision and unpickling the hook).
The dask-scheduler shares the worker's core.
Each round also measures the cores' own ceiling for the hook: the same 64
images through blur10 in one process alone, then in two at once, one per
core, the Dask processes stopped meanwhile (2 x the first time / the
second: below 2 where two busy cores slow each other down, as on a VM).
Prints each round and the median of the per-round ratios (target >= 1.6x),
and the images per CPU second of all our processes (trainer and its hook
process; with the cluster also the worker, its hook process and the
scheduler), cluster against alone: what offloading costs in CPU, a
figure that other jobs on the cores disturb less than the wall clock.

usage: bench/hooks_cluster.py [--rounds 3] [--cores 0,1] [--batches-per-task N] SHARD...
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
START_TIMEOUT_S = 60

TRAINER = r"""
import json, resource, sys, time
started = time.perf_counter()
import torch, stoker
from hooks_vs_dataloader import crop_blur10
torch.set_num_threads(1)
a = json.loads(sys.argv[1])
t0 = time.perf_counter()
loader = stoker.Loader(a["shards"], threads=1, seed=a["seed"], index=a["index"],
                       transform=None, map=crop_blur10, map_shape=(3, 224, 224),
                       hook_processes=1, cluster=a["cluster"],
                       batches_per_task=a["batches_per_task"] if a["cluster"] else None)
n = sum(len(images) for images, labels in loader)
seconds = time.perf_counter() - t0
c = loader.stats().get("cluster") or {}
loader.close()  # reaps the hook processes: their CPU time is then the children's
cpu = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                            resource.getrusage(resource.RUSAGE_CHILDREN)))
print(json.dumps({"images": n, "seconds": seconds, "cluster": c, "cpu_s": cpu,
                  "imports_s": t0 - started}))
"""

# The machine's own ceiling for this hook: the same images through blur10
# in one process alone, then in one process on each core at once (with the
# hook processes' environment, torch on one thread). Two cores of a VM
# share caches, memory bandwidth and their host: each image costs more CPU
# when both are busy, which the cluster run pays and the alone run does not.
CEILING = r"""
import json, sys, time
import torch, stoker
from hooks_vs_dataloader import blur10
torch.set_num_threads(1)
a = json.loads(sys.argv[1])
with stoker.Loader(a["shards"], batch_size=32, image_size=224, threads=1, seed=a["seed"],
                   shuffle_buffer=64, index=a["index"]) as loader:
    images = [image.clone() for _, (batch, _) in zip(range(2), loader) for image in batch]
start = time.perf_counter()
for i, image in enumerate(images):
    torch.manual_seed(i)  # the same sigmas in every process
    blur10(image, None)
print(time.perf_counter() - start)
"""


def ceiling(trainer_core, worker_core, spec, env):
    """Images/s of two processes, one per core, over one process alone."""
    def run(core):
        return subprocess.Popen(["taskset", "-c", core, sys.executable, "-c", CEILING,
                                 json.dumps(spec)], text=True, stdout=subprocess.PIPE,
                                env=env, cwd=HERE)
    one = float(run(trainer_core).communicate()[0])
    pair = [run(trainer_core), run(worker_core)]
    both = [float(p.communicate()[0]) for p in pair]
    return 2 * one / statistics.mean(both)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, core, env, log):
    """A Dask process in a session of its own: a signal to its group also
    reaches the nanny's worker process and the worker's fork server."""
    return subprocess.Popen(["taskset", "-c", core] + cmd, env=env, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def stop(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def tree_cpu_s(pids):
    """User + system CPU seconds of the processes and their descendants alive
    now, and of the children they have reaped (a hook process of an earlier
    round stopped during this one moves its time into its fork server's
    children's time: the sum does not drop)."""
    total, todo = 0.0, list(pids)
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            pass
    return total


def wait_for_worker(address, deadline):
    from distributed import Client
    with Client(address, set_as_default=False, timeout=START_TIMEOUT_S) as client:
        while not client.scheduler_info()["workers"]:
            if time.monotonic() > deadline:
                sys.exit("hooks_cluster: the dask-worker did not join")
            time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", default="0,1", help="the trainer's core, the worker's")
    parser.add_argument("--batches-per-task", type=int, default=None,
                        help="a fixed task size (default: left to stoker)")
    parser.add_argument("shards", nargs="+")
    args = parser.parse_args()
    args.shards = [os.path.abspath(s) for s in args.shards]  # the children run in bench/
    trainer_core, worker_core = args.cores.split(",")
    env = dict(os.environ, OMP_NUM_THREADS="1", STOKER_WORKER_THREADS="1",
               PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in
                                          (os.environ.get("PYTHONPATH"), HERE) if p))
    tmp = tempfile.mkdtemp(prefix="stoker-hooks-cluster-")
    index = os.path.join(tmp, "index.json")
    import stoker
    stoker.Loader(args.shards, index=index, threads=1).close()
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(os.path.join(tmp, "dask.log"), "wb")
    scheduler = start(["dask-scheduler", "--host", "127.0.0.1", "--port", str(port),
                       "--no-dashboard"], worker_core, env, log)
    ratios, per_cpu, ceilings, reads, tasks = [], [], [], [], []
    from stoker.hooks.processes import hook_process_env  # the malloc settings of hook processes
    ceiling_env = dict(hook_process_env(), **{k: env[k] for k in ("PYTHONPATH", "OMP_NUM_THREADS")})
    # The worker as the docs start it: with Dask's nanny, which puts its
    # own MALLOC_TRIM_THRESHOLD_ in the worker's environment.
    worker = start(["dask-worker", address, "--nthreads", "1", "--no-dashboard",
                    "--memory-limit", "0", "--preload", "stoker"], worker_core, env, log)
    try:
        wait_for_worker(address, time.monotonic() + START_TIMEOUT_S)
        for r in range(args.rounds):
            results = {}
            for mode in (("alone", "cluster") if r % 2 == 0 else ("cluster", "alone")):
                spec = {"shards": args.shards, "index": index, "seed": 100 + r,
                        "cluster": address if mode == "cluster" else None,
                        "batches_per_task": args.batches_per_task}
                dask_cpu = tree_cpu_s([worker.pid, scheduler.pid])
                out = subprocess.run(["taskset", "-c", trainer_core, sys.executable, "-c",
                                      TRAINER, json.dumps(spec)], check=True, text=True,
                                     stdout=subprocess.PIPE, env=env, cwd=HERE).stdout
                results[mode] = res = json.loads(out.strip().splitlines()[-1])
                if mode == "cluster":  # the worker's, its hook processes' and the scheduler's
                    res["cpu_s"] += tree_cpu_s([worker.pid, scheduler.pid]) - dask_cpu
                c = res["cluster"]
                print(f"round {r} {mode:7s}: {res['images']} images in {res['seconds']:.1f} s "
                      f"(+ {res['imports_s']:.1f} s of imports before) "
                      f"= {res['images'] / res['seconds']:.1f} images/s, "
                      f"{res['images'] / res['cpu_s']:.2f} images per CPU second"
                      + (f" ({c['batches_cluster']} batches from the worker, "
                         f"{c['batches_local']} here, {c['ranges_cluster']} ranges in "
                         f"{c['tasks_submitted']} tasks sent, {c['ranges_taken_back']} taken "
                         f"back, {c['tasks_dropped']} results dropped; "
                         f"{c['read_per_sample']:.2f} samples read per sample delivered)"
                         if c else ""),
                      flush=True)
            for proc in (worker, scheduler):  # idle Dask ticks would slow the pair's one
                os.killpg(proc.pid, signal.SIGSTOP)
            try:
                ceilings.append(ceiling(trainer_core, worker_core,
                                        dict(spec, cluster=None), ceiling_env))
            finally:
                for proc in (worker, scheduler):
                    os.killpg(proc.pid, signal.SIGCONT)
            print(f"round {r} ceiling: two processes of the hook, one per core, "
                  f"{ceilings[-1]:.2f}x one alone", flush=True)
            ratios.append(results["alone"]["seconds"] / results["cluster"]["seconds"])
            reads.append(results["cluster"]["cluster"]["read_per_sample"])
            tasks.append(results["cluster"]["cluster"]["tasks_submitted"])
            per_cpu.append((results["cluster"]["images"] / results["cluster"]["cpu_s"]) /
                           (results["alone"]["images"] / results["alone"]["cpu_s"]))
    finally:
        stop(worker)
        stop(scheduler)
    ratio = statistics.median(ratios)
    print(f"\nwhole epoch, trainer on core {trainer_core} + one Dask worker on core "
          f"{worker_core} / trainer alone: {ratio:.2f}x (rounds: "
          f"{', '.join(f'{x:.2f}' for x in ratios)}; target >= 1.6x: "
          f"{'met' if ratio >= 1.6 else 'NOT met'}); batches_per_task="
          f"{args.batches_per_task or 'auto'}")
    print(f"with the worker: {statistics.median(reads):.2f} samples read per sample delivered "
          f"(rounds: {', '.join(f'{x:.2f}' for x in reads)}), tasks sent: "
          f"{', '.join(str(t) for t in tasks)}")
    print(f"the cores' own ceiling for the hook (two processes at once / one alone): "
          f"{statistics.median(ceilings):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ceilings)}"
          f"); the cluster run reaches {statistics.median(r / c for r, c in zip(ratios, ceilings)):.0%}"
          f" of it (median of the rounds)")
    print(f"images per CPU second (every process of ours), cluster / alone: "
          f"{statistics.median(per_cpu):.2f}x (1.0: offloading costs no CPU; less sensitive "
          f"than the wall-clock ratio to other load on the cores)")


if __name__ == "__main__":
    main()
