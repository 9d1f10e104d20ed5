# SPDX-License-Identifier: MIT
"""Elastic resume (issue 36): an epoch interrupted at world size W1 resumes
at W2. Every rank of the old run saved its own state_dict(); each new rank
loads the list of them. Over the interrupted epoch the union of the keys
delivered before and after is the dataset, each sample once (only the
padding that equal shares need is repeated, and stats() counts it), every
new rank takes the same number of steps, each sample is the same bytes as
in an uninterrupted run, and the next epoch is a fresh W2 run's.

Shards of 7..19 noise JPEGs (79 samples: shares that need padding at most
world sizes), each sample's label its own number. Most combinations run the
ranks one after another in this process (rank=/world_size=); one pair of
runs uses real gloo process groups, one a hook (map=) with other thread and
hook process counts, one a Dask cluster (cluster=). Each in the global order
(local uncompressed shards with an index) and under the shuffle window (a
shuffle_buffer given; remote shards without a node cache), and the same
shards from nginx through a node cache (the cached global order).
"""
import functools
import gzip
import hashlib
import json
import os

import numpy as np
import pytest

import hook_fns
import stoker
import test_cluster

pytestmark = pytest.mark.filterwarnings("ignore:make_current is deprecated:DeprecationWarning")
from conftest import run_ranks
from node_sim import Nginx
from test_coverage_ddp import make_index, write_numbered_shards

SIZES = (7, 19, 4, 13, 11, 9, 6, 10)
TOTAL = sum(SIZES)
BATCH = 4
OPTIONS = dict(batch_size=BATCH, image_size=16, seed=3)
EPOCH = 1


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, stoker_bin):
    directory = tmp_path_factory.mktemp("elastic")
    urls = write_numbered_shards(directory, SIZES, seed=7)
    return urls, make_index(stoker_bin, urls, directory / "index.json")


def samples(images, labels):
    """(label, digest of its image) per sample of a batch."""
    return [(int(label), hashlib.sha1(image.numpy().tobytes()).hexdigest())
            for image, label in zip(images, labels)]


def run_rank(urls, index, rank, world, stop=None, state=None, epochs=1, **kw):
    """One rank: epoch EPOCH (or the loaded state's), stopped after `stop`
    batches. Returns len() before iterating, the batches' samples, the state
    at the end and the padding counted; with epochs=2 the next epoch's
    samples too."""
    kw = dict(OPTIONS, **{"threads": 1, **kw})
    loader = stoker.Loader(urls, index=index, rank=rank, world_size=world, **kw)
    loader.set_epoch(EPOCH)
    if state is not None:
        loader.load_state_dict(state)
        loader.set_epoch(EPOCH)  # the usual loop; keeps the loaded position
    length, batches = len(loader), []
    for step, (images, labels) in enumerate(loader):
        batches.append(samples(images, labels))
        if step + 1 == stop:
            break
    stats = loader.stats()
    out = {"len": length, "batches": batches, "state": loader.state_dict(),
           "padded": stats["samples_padded"], "cluster": stats.get("cluster")}
    if epochs == 2:
        out["next"] = [samples(i, l) for i, l in loader]
    loader.close()
    return out


# The shuffle window over the same local shards (a shuffle_buffer given asks
# for it): 8 samples, so that a stop after one batch of 4 is inside the
# first window and the last batches come from the final drain.
WINDOW = (("shuffle_buffer", 8),)
# The window at its default reach (2000): the whole epoch is one window.
DEFAULT_WINDOW = (("window_shuffle", 1),)


@functools.lru_cache(maxsize=None)
def reference(urls, index, options=()):
    """Every sample's bytes in epoch EPOCH of an uninterrupted one-rank run:
    a sample's augmentation is keyed by the sample, not by the rank."""
    return dict(s for b in run_rank(list(urls), index, 0, 1, **dict(options))["batches"]
                for s in b)


@functools.lru_cache(maxsize=None)
def interrupted(urls, index, world, stop, options=()):
    """The old run: every rank stopped after `stop` batches (DDP steps in
    lockstep), as they save their checkpoints."""
    return [run_rank(list(urls), index, r, world, stop=stop, **dict(options))
            for r in range(world)]


def flat(ranks, key="batches"):
    return [s for r in ranks for b in r[key] for s in (b if key == "batches" else [b])]


def check_resumed_epoch(before, after, new_world, want, old_padding=None):
    """old_padding: what the old ranks counted as padding (under node
    affinity a node short of its ranks' shares repeats more than W1 - 1)."""
    got_before, got_after = flat(before), flat(after)
    labels_before = [label for label, _ in got_before]
    labels_after = [label for label, _ in got_after]
    # Equal steps on the new ranks, as len() said before the loop.
    steps = {len(r["batches"]) for r in after}
    assert len(steps) == 1 and steps == {r["len"] for r in after}, \
        [(r["len"], len(r["batches"])) for r in after]
    # The old ranks repeated at most their padding.
    repeated_before = len(labels_before) - len(set(labels_before))
    assert repeated_before <= (len(before) - 1 if old_padding is None else old_padding)
    # Nothing delivered before is delivered again; nothing is left out.
    assert not set(labels_before) & set(labels_after)
    assert set(labels_before) | set(labels_after) == set(range(TOTAL))
    # The new ranks repeat exactly the padding they count, at most W2 - 1.
    repeated = len(labels_after) - len(set(labels_after))
    assert repeated == sum(r["padded"] for r in after) <= new_world - 1
    # Each sample is the bytes an uninterrupted run gives it.
    assert all(want[label] == digest for label, digest in got_before + got_after)


@pytest.mark.parametrize("new_world", [1, 2, 3, 4])
@pytest.mark.parametrize("world,stop", [(2, 1), (2, 5), (2, 9), (4, 1), (4, 3), (4, 4)])
def test_resume_at_another_world_size_delivers_the_rest_once(indexed, world, stop, new_world):
    urls, index = indexed
    before = interrupted(tuple(urls), index, world, stop)
    states = [r["state"] for r in before]
    after = [run_rank(urls, index, r, new_world, state=states) for r in range(new_world)]
    check_resumed_epoch(before, after, new_world, reference(tuple(urls), index))


@pytest.mark.parametrize("new_world", [1, 2, 3, 4])
@pytest.mark.parametrize("world,stop", [(2, 1), (2, 5), (2, 9), (4, 1), (4, 3), (4, 4)])
def test_under_the_shuffle_window(indexed, world, stop, new_world):
    """Each old rank delivered its run out of order, through its window:
    replayed on the index's counts, the window and the interleave say which
    samples. Stops inside the first window (4 samples of 8), past it, and
    in the final drain; the new ranks read the rest through their own."""
    urls, index = indexed
    before = interrupted(tuple(urls), index, world, stop, WINDOW)
    states = [r["state"] for r in before]
    after = [run_rank(urls, index, r, new_world, state=states, **dict(WINDOW))
             for r in range(new_world)]
    check_resumed_epoch(before, after, new_world, reference(tuple(urls), index, WINDOW))


def test_under_the_default_window_the_whole_epoch_held(indexed):
    """window_shuffle=1 at the default reach (2000 > the 79 samples): every
    output so far came from the first window and the final drain."""
    urls, index = indexed
    before = interrupted(tuple(urls), index, 2, 3, DEFAULT_WINDOW)
    after = [run_rank(urls, index, r, 3, state=[b["state"] for b in before],
                      **dict(DEFAULT_WINDOW)) for r in range(3)]
    check_resumed_epoch(before, after, 3, reference(tuple(urls), index, DEFAULT_WINDOW))


def test_under_the_window_any_threads_then_a_fresh_epoch(indexed):
    """The resumed epoch is the same batches whatever the threads, and the
    next epoch is a fresh window run's at the new size."""
    urls, index = indexed
    states = [r["state"] for r in interrupted(tuple(urls), index, 4, 2, WINDOW)]
    merged = json.loads(json.dumps(stoker.merge_states(states)))
    resumed = [run_rank(urls, index, r, 3, state=merged, epochs=2, **dict(WINDOW))
               for r in range(3)]
    threaded = [run_rank(urls, index, r, 3, state=merged, threads=3, **dict(WINDOW))
                for r in range(3)]
    assert [r["batches"] for r in threaded] == [r["batches"] for r in resumed]
    assert [r["next"] for r in resumed] == fresh_epoch(urls, index, 3, threads=2, **dict(WINDOW))


def test_under_the_window_a_resumed_epoch_resumes_again(indexed):
    urls, index = indexed
    window = dict(WINDOW)
    first = interrupted(tuple(urls), index, 2, 3, WINDOW)
    middle = [run_rank(urls, index, r, 3, state=[s["state"] for s in first], stop=2, **window)
              for r in range(3)]
    assert all(r["state"]["remaining"] for r in middle)
    # More ranges than a rest read front to back (2 per old rank + 1): the
    # extension asked the C loader again with the room it said it needs.
    assert len(middle[0]["state"]["remaining"]) > 2 * 2 + 1
    # Rank 2 resumed alone at the same size continues exactly.
    whole = run_rank(urls, index, 2, 3, state=[s["state"] for s in first], **window)
    alone = run_rank(urls, index, 2, 3, state=middle[2]["state"], **window)
    assert middle[2]["batches"] + alone["batches"] == whole["batches"]
    # All three states at four ranks, then at one: the rest of the rest, once.
    for new_world in (4, 1):
        last = [run_rank(urls, index, r, new_world, state=[s["state"] for s in middle],
                         **window) for r in range(new_world)]
        check_resumed_epoch(first + middle, last, new_world,
                            reference(tuple(urls), index, WINDOW))


def test_one_rank_state_alone_resumes_at_three(indexed):
    """A run of one rank has one state: given alone (not in a list), it is
    the whole set."""
    urls, index = indexed
    before = [run_rank(urls, index, 0, 1, stop=5)]
    after = [run_rank(urls, index, r, 3, state=before[0]["state"]) for r in range(3)]
    check_resumed_epoch(before, after, 3, reference(tuple(urls), index))


def test_states_from_json_and_not_merge_alike(indexed):
    """Inside a resumed epoch the states carry its ranges; a checkpoint read
    back from JSON has lists where the others have tuples: the same set."""
    urls, index = indexed
    first = [r["state"] for r in interrupted(tuple(urls), index, 2, 2)]
    middle = [run_rank(urls, index, r, 3, state=first, stop=1)["state"] for r in range(3)]
    mixed = [json.loads(json.dumps(middle[0]))] + middle[1:]
    assert stoker.merge_states(mixed) == stoker.merge_states(middle)


def test_without_shuffle_too(indexed):
    """shuffle=False: each rank reads its run in storage order, front to back."""
    urls, index = indexed
    plain = dict(shuffle=False, transform="eval")
    before = [run_rank(urls, index, r, 2, stop=3, **plain) for r in range(2)]
    after = [run_rank(urls, index, r, 3, state=[b["state"] for b in before], **plain)
             for r in range(3)]
    want = dict(s for b in run_rank(urls, index, 0, 1, **plain)["batches"] for s in b)
    check_resumed_epoch(before, after, 3, want)


def test_the_next_epoch_is_a_fresh_run_at_the_new_size(indexed):
    urls, index = indexed
    states = [r["state"] for r in interrupted(tuple(urls), index, 4, 3)]
    # Through merge_states() (one object to store) and in JSON, as a
    # checkpoint keeps it.
    merged = json.loads(json.dumps(stoker.merge_states(reversed(states))))
    resumed = [run_rank(urls, index, r, 3, state=merged, epochs=2) for r in range(3)]
    assert [r["next"] for r in resumed] == fresh_epoch(urls, index, 3, threads=2)


def test_a_resumed_epoch_resumes_again_at_its_size_or_another(indexed):
    urls, index = indexed
    first = interrupted(tuple(urls), index, 4, 2)
    # Three ranks take the rest, stop after 2 steps and save.
    middle = [run_rank(urls, index, r, 3, state=[s["state"] for s in first], stop=2)
              for r in range(3)]
    assert all(r["state"]["remaining"] for r in middle)
    # Rank 1 resumed alone at the same size continues exactly.
    whole = run_rank(urls, index, 1, 3, state=[s["state"] for s in first])
    alone = run_rank(urls, index, 1, 3, state=middle[1]["state"])
    assert middle[1]["batches"] + alone["batches"] == whole["batches"]
    # All three states at two ranks: the rest of the rest, once.
    last = [run_rank(urls, index, r, 2, state=[s["state"] for s in middle]) for r in range(2)]
    check_resumed_epoch(first + middle, last, 2, reference(tuple(urls), index))


def test_new_ranks_with_node_affinity(indexed):
    """The resumed epoch is split over all new ranks (the old ones split one
    sequence); the next epoch is a fresh run's with node affinity."""
    urls, index = indexed
    nodes = dict(node_affinity=1, ranks_per_node=2)
    states = [r["state"] for r in interrupted(tuple(urls), index, 2, 4)]
    after = [run_rank(urls, index, r, 4, state=states, epochs=2, **nodes) for r in range(4)]
    check_resumed_epoch(interrupted(tuple(urls), index, 2, 4), after, 4,
                        reference(tuple(urls), index))
    assert [r["next"] for r in after] == fresh_epoch(urls, index, 4, **nodes)


@functools.lru_cache(maxsize=None)
def interrupted_nodes(urls, index, world, rpn, stop):
    """The old run under node affinity (rpn ranks per node): each node's
    ranks split the node's own shards' sequence."""
    nodes = dict(node_affinity=1, ranks_per_node=rpn)
    return [run_rank(list(urls), index, r, world, stop=stop, **nodes) for r in range(world)]


def fresh_epoch(urls, index, world, threads=1, **kw):
    """Epoch EPOCH + 1 of a fresh run at world ranks: each rank's samples."""
    out = []
    for r in range(world):
        loader = stoker.Loader(urls, index=index, rank=r, world_size=world, threads=threads,
                               **OPTIONS, **kw)
        loader.set_epoch(EPOCH + 1)
        out.append([samples(i, l) for i, l in loader])
        loader.close()
    return out


@pytest.mark.parametrize("new_world", [1, 2, 3, 4])
@pytest.mark.parametrize("world,rpn,stop", [(2, 1, 2), (2, 1, 9), (2, 2, 4), (4, 1, 1),
                                            (4, 1, 4), (4, 2, 2), (4, 2, 3)])
def test_states_saved_under_node_affinity_resume_at_another_size(indexed, world, rpn, stop,
                                                                 new_world):
    """Each old node delivered a prefix of its ranks' runs of its own
    sequence; the rest of all nodes' sequences (a node's tail that the
    equal shares leave out of a whole epoch included) is delivered once
    over the new ranks, in equal steps, and the next epoch is a fresh run's
    at the new size (by node where its ranks per node divide it)."""
    urls, index = indexed
    before = interrupted_nodes(tuple(urls), index, world, rpn, stop)
    states = [r["state"] for r in before]
    new_rpn = rpn if new_world % rpn == 0 else 1
    nodes = dict(node_affinity=1, ranks_per_node=new_rpn)
    after = [run_rank(urls, index, r, new_world, state=states, epochs=2, **nodes)
             for r in range(new_world)]
    check_resumed_epoch(before, after, new_world, reference(tuple(urls), index),
                        old_padding=sum(r["padded"] for r in before))
    assert [r["next"] for r in after] == fresh_epoch(urls, index, new_world, **nodes)


def test_a_resumed_epoch_of_node_states_resumes_again(indexed):
    """The ranges left after a run under node affinity are of its nodes'
    sequences: a run resumed from them, interrupted and resumed again at
    yet another size, still delivers each sample once."""
    urls, index = indexed
    first = interrupted_nodes(tuple(urls), index, 4, 2, 2)
    middle = [run_rank(urls, index, r, 3, state=[s["state"] for s in first], stop=1)
              for r in range(3)]
    assert all(r["state"]["remaining"] and r["state"]["remaining_nodes"] == 2 for r in middle)
    # Through JSON, as a checkpoint keeps them.
    states = json.loads(json.dumps([r["state"] for r in middle]))
    last = [run_rank(urls, index, r, 2, state=states) for r in range(2)]
    check_resumed_epoch(first + middle, last, 2, reference(tuple(urls), index),
                        old_padding=sum(r["padded"] for r in first))


def test_incomplete_or_mixed_states_are_refused(indexed):
    urls, index = indexed
    states = [r["state"] for r in interrupted(tuple(urls), index, 4, 3)]
    loader = stoker.Loader(urls, index=index, rank=0, world_size=3, threads=1, **OPTIONS)
    with pytest.raises(ValueError, match=r"incomplete: rank 2 of 4 missing"):
        loader.load_state_dict(states[:2] + states[3:])
    with pytest.raises(ValueError, match=r"rank 1 given twice"):
        loader.load_state_dict(states[:3] + [states[1]])
    with pytest.raises(ValueError, match=r"different epochs \(rank 0: 1, rank 3: 2\)"):
        loader.load_state_dict(states[:3] + [dict(states[3], epoch=2)])
    with pytest.raises(ValueError, match=r"different seeds"):
        loader.load_state_dict([dict(s, seed=4) if s["rank"] == 2 else s for s in states])
    with pytest.raises(ValueError, match=r"rank 0's of 4 ranks.*list of all 4 ranks"):
        loader.load_state_dict(states[0])
    with pytest.raises(ValueError, match=r"lacks rank, world_size"):
        loader.load_state_dict([{"epoch": 1, "batch": 3, "seed": 3, "fingerprint": 1}])
    loader.close()
    other = stoker.Loader(urls[:-1], index=None, rank=0, world_size=1, threads=1, **OPTIONS)
    with pytest.raises(ValueError, match=r"other URLs or options"):
        other.load_state_dict(states)
    other.close()


@pytest.mark.parametrize("options,why", [
    (dict(index=False), "needs a dataset index"),
    (dict(shuffle=False, whole_shards=True), "whole_shards splits the epoch by shard"),
    (dict(samples_per_rank=30), "samples_per_rank is set"),
    (dict(WINDOW, node_affinity=1, ranks_per_node=1),
     "under node affinity and a shuffle window are not built"),
])
def test_what_counts_cannot_tell_is_refused_naming_why(indexed, options, why):
    """The old run's states are complete and of the same dataset, but the
    new loader would not know from counts what the old ranks delivered."""
    urls, index = indexed
    new_index = None if options.pop("index", True) is False else index
    states = [run_rank(urls, index, r, 2, stop=1, **options)["state"] for r in range(2)]
    loader = stoker.Loader(urls, index=new_index, rank=0, world_size=1, threads=1, **OPTIONS,
                           **options)
    with pytest.raises(stoker.Error, match=f"elastic resume .*{why}"):
        loader.load_state_dict(states)
    loader.close()


@pytest.fixture(scope="module")
def remote(indexed, tmp_path_factory, stoker_bin):
    """The same shards from nginx on 127.0.0.1, an index over their URLs."""
    urls, _ = indexed
    work = tmp_path_factory.mktemp("elastic-remote")
    with Nginx(os.path.dirname(urls[0]), work / "nginx") as server:
        http = [server.url(os.path.basename(u)) for u in urls]
        yield http, make_index(stoker_bin, http, work / "index.json"), work


@pytest.mark.parametrize("cached", [True, False], ids=["cache-global-order", "no-cache-window"])
def test_remote_shards_through_a_node_cache_or_the_window(remote, cached):
    """Object storage: with a node cache that holds the shards, the global
    order read from the cached copies; without one, the window over the
    streams. Either resumes at another world size."""
    urls, index, work = remote
    options = (("cache_dir", str(work / "cache")), ("cache_size", 1 << 30)) if cached else ()
    probe = stoker.Loader(urls, index=index, rank=0, world_size=2, **OPTIONS, **dict(options))
    assert probe._c.info()["global_order"] is cached
    probe.close()
    before = interrupted(tuple(urls), index, 2, 3, options)
    after = [run_rank(urls, index, r, 3, state=[b["state"] for b in before], **dict(options))
             for r in range(3)]
    check_resumed_epoch(before, after, 3, reference(tuple(urls), index, options))


def test_states_of_the_cached_order_do_not_resume_the_window(remote):
    """The global order's positions and the window's are of two different
    sequences: states saved with a cache that held the shards are refused by
    a loader without it (which would read them through the window)."""
    urls, index, work = remote
    cached = (("cache_dir", str(work / "cache")), ("cache_size", 1 << 30))
    states = [r["state"] for r in interrupted(tuple(urls), index, 2, 3, cached)]
    loader = stoker.Loader(urls, index=index, rank=0, world_size=3, threads=1, **OPTIONS)
    with pytest.raises(ValueError, match="other URLs or options"):
        loader.load_state_dict(states)
    loader.close()


def test_the_window_over_compressed_shards_is_refused(indexed, tmp_path, stoker_bin):
    """Gzipped shards have counts but no sample offsets: the samples the
    window held would be read again from each shard's start, one by one."""
    urls, _ = indexed
    zipped = []
    for url in urls:
        path = tmp_path / (url.rsplit("/", 1)[-1] + ".gz")
        with open(url, "rb") as f, gzip.open(path, "wb") as out:
            out.write(f.read())
        zipped.append(str(path))
    index = make_index(stoker_bin, zipped, tmp_path / "index.json")
    states = [run_rank(zipped, index, r, 2, stop=1)["state"] for r in range(2)]
    loader = stoker.Loader(zipped, index=index, rank=0, world_size=1, threads=1, **OPTIONS)
    with pytest.raises(stoker.Error, match=r"elastic resume .*under the shuffle window it needs "
                                           r"uncompressed shards"):
        loader.load_state_dict(states)
    loader.close()


@pytest.mark.parametrize("order", [(), WINDOW], ids=["global", "window"])
def test_with_a_hook_and_other_thread_and_process_counts(indexed, order):
    urls, index = indexed
    hooked = dict(map=hook_fns.augment, **dict(order))
    want = dict(s for b in run_rank(urls, index, 0, 1, **hooked)["batches"] for s in b)
    before = [run_rank(urls, index, r, 2, stop=3, hook_processes=1, **hooked) for r in range(2)]
    states = [r["state"] for r in before]
    after = [run_rank(urls, index, r, 3, state=states, threads=2, hook_processes=2, **hooked)
             for r in range(3)]
    check_resumed_epoch(before, after, 3, want)


@pytest.mark.parametrize("order", [(), WINDOW], ids=["global", "window"])
def test_with_a_dask_cluster(indexed, cluster, order):
    urls, index = indexed
    cluster.add_worker("w1")
    before = interrupted(tuple(urls), index, 4, 2, order)
    states = [r["state"] for r in before]
    after = [run_rank(urls, index, r, 2, state=states, cluster=cluster.client,
                      batches_per_task=1, **dict(order)) for r in range(2)]
    check_resumed_epoch(before, after, 2, reference(tuple(urls), index, order))
    # Whoever made them (the workers, or the local thread on a machine too
    # loaded for them to be first: not asserted), all are counted.
    assert sum(r["cluster"]["batches_cluster"] + r["cluster"]["batches_local"]
               for r in after) == sum(len(r["batches"]) for r in after)


def test_node_states_with_a_dask_cluster(indexed, cluster):
    """The workers' loaders rebuild the old nodes' sequences too: the
    ranges travel with their node count."""
    urls, index = indexed
    cluster.add_worker("w1")
    before = interrupted_nodes(tuple(urls), index, 4, 2, 2)
    states = [r["state"] for r in before]
    after = [run_rank(urls, index, r, 2, state=states, cluster=cluster.client,
                      batches_per_task=1) for r in range(2)]
    check_resumed_epoch(before, after, 2, reference(tuple(urls), index),
                        old_padding=sum(r["padded"] for r in before))
    # The fixture has the local thread wait for the workers' first task.
    assert sum(r["cluster"]["batches_cluster"] for r in after) > 0


def test_a_batch_range_of_a_resumed_epoch_is_the_trainers(indexed):
    """What a Dask task does (_cluster_worker.make_range): a loader of its
    own told the trainer's remainder, then a range of its batches. The
    trainer's loader gives the same batches at those indices."""
    urls, index = indexed
    states = [r["state"] for r in interrupted(tuple(urls), index, 4, 1)]
    trainer = run_rank(urls, index, 1, 2, state=states)
    # The ranges the trainer's state names while in that epoch.
    remaining = run_rank(urls, index, 1, 2, state=states, stop=1)["state"]["remaining"]
    assert remaining
    task = stoker.Loader(urls, index=index, rank=1, world_size=2, threads=1, **OPTIONS)._c
    for first, count in ((2, 2), (4, 1), (0, 2)):
        task.set_remainder(EPOCH, remaining)
        task.seek_range(EPOCH, first, count)
        got = []
        while (b := task.next()) is not None:
            got.append([int(v) for v in np.frombuffer(b.labels, np.int64)])
            del b
        assert got == [[label for label, _ in batch]
                       for batch in trainer["batches"][first:first + count]]
    task.close()


cluster = test_cluster.cluster  # the fixture: a dask-scheduler and workers on 127.0.0.1

RANK = r'''
import json, sys
import torch.distributed as dist
import stoker
rank, world, port, index, urls, states, stop = sys.argv[1:8]
rank, world, stop = int(rank), int(world), int(stop)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world)
loader = stoker.Loader(json.loads(urls), index=index, batch_size=%d, image_size=16, threads=1,
                       seed=3)
loader.set_epoch(%d)
if states != "-":
    with open(states) as f:
        loader.load_state_dict(json.load(f))
    loader.set_epoch(%d)
out = {"len": len(loader), "batches": []}
for step, (_, labels) in enumerate(loader):
    out["batches"].append([[int(v), ""] for v in labels])
    if step + 1 == stop:
        break
out["state"] = loader.state_dict()
out["padded"] = loader.stats()["samples_padded"]
dist.barrier()
dist.destroy_process_group()
print(json.dumps(out))
''' % (BATCH, EPOCH, EPOCH)


def test_gloo_ranks_two_then_three(indexed, clean_env_factory, tmp_path):
    urls, index = indexed
    env = clean_env_factory(OMP_NUM_THREADS=1)
    before = run_ranks(RANK, 2, [index, json.dumps(urls), "-", 4], env, timeout=240)
    states = tmp_path / "states.json"
    states.write_text(json.dumps([r["state"] for r in before]))
    after = run_ranks(RANK, 3, [index, json.dumps(urls), states, 0], env, timeout=240)
    want = {label: "" for label in range(TOTAL)}  # labels only through the processes
    check_resumed_epoch(before, after, 3, want)


def test_states_of_a_window_run_do_not_resume_a_global_order():
    """Remote shards get the global order where a node cache holds a
    node's shards, which depends on the node count: a run whose old ranks
    read a window does not resume one that reads the global order."""
    from stoker.loader import elastic
    merged = {"dataset": 1, "seed": 3, "global_order": False}
    with pytest.raises(ValueError, match=r"saved under a shuffle window, this loader reads the "
                                         r"global order"):
        elastic.check(merged, 1, 3, True)
    elastic.check(merged, 1, 3, False)  # the C loader then says why a window cannot resume


def test_a_node_count_that_does_not_fit_is_refused(indexed):
    """The C calls name what is wrong with the old run's node layout."""
    urls, index = indexed
    c = stoker.Loader(urls, index=index, rank=0, world_size=2, threads=1, **OPTIONS)._c
    with pytest.raises(stoker.Error, match=r"2 ranks per node do not divide the old world size 3"):
        c.remainder(0, [1, 2, 3], None, 2)
    with pytest.raises(stoker.Error, match=r"ranges are of 9 nodes' sequences, for 8 shards"):
        c.set_remainder(EPOCH, [(0, 5)], 9)
    with pytest.raises(stoker.Error, match=r"ranges are of 0 nodes' sequences"):
        c.set_remainder(EPOCH, [(0, 5)], 0)
    c.close()
