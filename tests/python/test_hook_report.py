# SPDX-License-Identifier: MIT
"""report() with hooks names them as the limit when the training loop waits
on them (issue 39). Before, the library's report judged its own caller,
stoker's hook thread, and said "the consumer, not the input, sets the pace"
while the loop waited for every batch. The hook here takes 0.1 s of wall
time per sample (sleeping: load cannot make it faster, and cannot make the
process idle for the fifth of its time that would put it below 80% busy;
its start, the fork server's imports, counts as busy too) and the loop
does nothing, so the loop waits on the hooks by construction."""
import hook_fns
import stoker


def test_report_names_the_hooks_when_the_loop_waits_on_them(even_shards):
    loader = stoker.Loader(even_shards[:1], batch_size=4, image_size=16, threads=1,
                           map=hook_fns.tenth_of_a_second, hook_processes=1)
    with loader:
        batches = sum(1 for _ in loader)
        stats, report = loader.stats(), loader.report()
    print(report)
    assert batches == 5
    assert stats["hook_processes"] == 1 and stats["hook_wait_ns"] > 0
    assert stats["hook_busy_ns"] >= 20 * 0.1e9 * 0.99  # 20 samples of 0.1 s at least
    first = report.splitlines()[0]
    assert first.startswith("input-bound: the training loop waited for hooked batches"), report
    assert "verdict: the hooks are the limit" in report, report
    assert "the consumer, not the input, sets the pace" not in report, report
    # The library's stages follow, as what feeds the hook processes.
    assert "stoker's stages, which feed the hook processes" in report
    assert "image decoding: 1 thread" in report
    assert report.count("verdict:") == 1  # the library's, about stoker's own thread, is left out
