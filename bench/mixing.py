# SPDX-License-Identifier: MIT
"""Label mixing of a sample order: distinct classes per batch, against a
uniform random permutation of the same labels and against WebDataset's
shuffles, for tests/python/test_mixing.py and bench/shuffle_mixing.py.

WebDataset is not packaged for Debian, so its two shuffles are written out
here from its source (webdataset/filters.py `_shuffle` and `pick`, and the
`shardshuffle=N` of `WebDataset(...)`, which runs the same buffer shuffle
over the shard list with a buffer of N): a list `buf` filled two samples
per output until it holds `bufsize`, emitting once it holds `initial`; each
output swaps a uniformly drawn element with the last and pops it.
"""
import random


def classes_per_batch(labels, batch_size):
    """Distinct labels of each batch of consecutive labels (the last, partial
    batch included, as the loader's default drop_last=0 delivers it)."""
    return [len(set(labels[i:i + batch_size])) for i in range(0, len(labels), batch_size)]


def mean(values):
    return sum(values) / len(values)


def uniform_classes_per_batch(labels, batch_size, rounds=50, seed=0):
    """Mean distinct labels per batch over `rounds` uniform permutations."""
    rng = random.Random(seed)
    labels = list(labels)
    total = 0.0
    for _ in range(rounds):
        rng.shuffle(labels)
        total += mean(classes_per_batch(labels, batch_size))
    return total / rounds


def _buffer_shuffle(items, bufsize, initial, rng):
    """WebDataset's `_shuffle` (filters.py), on an iterable."""
    items = iter(items)
    initial = min(initial, bufsize)
    buf = []

    def pick():
        k = rng.randint(0, len(buf) - 1)
        out = buf[k]
        buf[k] = buf[-1]
        buf.pop()
        return out

    for item in items:
        buf.append(item)
        if len(buf) < bufsize:
            try:
                buf.append(next(items))
            except StopIteration:
                pass
        if len(buf) >= initial:
            yield pick()
    while buf:
        yield pick()


def webdataset_order(shard_labels, seed, shardshuffle=8, bufsize=1000, initial=100):
    """The labels in the order `WebDataset(urls, shardshuffle=8).shuffle(1000)`
    yields them: shards read one after another in a buffer-shuffled order,
    then the samples through a buffer shuffle. shard_labels: per shard, its
    labels in storage order."""
    rng = random.Random(seed)
    order = list(_buffer_shuffle(range(len(shard_labels)), shardshuffle, 100, rng))
    stream = (label for s in order for label in shard_labels[s])
    return list(_buffer_shuffle(stream, bufsize, initial, rng))
