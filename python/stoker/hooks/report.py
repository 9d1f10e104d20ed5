# SPDX-License-Identifier: MIT
"""Loader.report() with hooks: whether the training loop waits on the hooked
batches and whether the hook processes are what it waits for.

The library's report (src/report.c) is about its own stages, and with hooks
its caller is stoker's hook thread, which waits on the C batches: when the
hook processes are the limit that thread waits on them, not on the C
stages, and the library's report said "not input-bound; the consumer sets
the pace" while the training loop waited for almost every batch. So the
loop's own wait (Loader.stats()["hook_wait_ns"]) and the hook processes'
busy share (the wall time from a chunk of samples sent to its last result,
"hook_busy_ns", and from a process's fork to its hooks loaded,
"hook_start_ns", over processes x wall time, as the C stages count theirs)
come first, then the library's stage lines as what feeds the hooks (its
own verdict, about the hook thread, left out).
"""

INPUT_BOUND_SHARE = 0.05  # as src/report.c: the loop waited 5% of its time or more
SATURATED_SHARE = 0.80  # a stage this busy has no spare capacity (src/report.c)


def report(stats, stages):
    """The report of a hooked Loader from its stats() and the library's
    report text (stages)."""
    wall, processes = stats["wall_ns"], stats["hook_processes"]
    if not wall or not stats["batches"] or not processes:
        return stages
    wait = min(1.0, stats["hook_wait_ns"] / wall)
    busy = min(1.0, (stats["hook_busy_ns"] + stats["hook_start_ns"]) / (processes * wall))
    bound = wait >= INPUT_BOUND_SHARE
    per_sample = stats["hook_busy_ns"] / 1e6 / max(1, stats["samples"])
    if not bound:
        verdict = "the consumer, not the input, sets the pace"
    elif busy >= SATURATED_SHARE:
        verdict = ("the hooks are the limit: raise hook_processes (if cores are free), offload "
                   "them to CPU hosts (cluster=), or do the common augmentations in stoker's "
                   "own transform")
    else:
        verdict = "the hook processes wait for samples: stoker's stages below feed them"
    lines = [
        f"{'input-bound' if bound else 'not input-bound'}: the training loop waited for hooked "
        f"batches {100 * wait:.0f}% of {wall / 1e9:.2f} s",
        f"hooks: {processes} hook process{'es' if processes != 1 else ''} {100 * busy:.0f}% busy, "
        f"{per_sample:.2f} ms per sample (wall time in map= and batch_map=), "
        f"{stats['hook_start_ns'] / 1e9:.2f} s starting",
        f"verdict: {verdict}",
        "stoker's stages, which feed the hook processes (their caller is stoker's hook thread):",
    ]
    feeding = [line for line in stages.splitlines()[1:] if not line.startswith("verdict:")]
    return "\n".join(lines + feeding) + "\n"
