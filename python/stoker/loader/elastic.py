# SPDX-License-Identifier: MIT
"""Elastic resume: the state_dict()s of all ranks of a run at one world size,
checked and merged into one state that a Loader at another world size loads.

Each rank saves its own state_dict() with its checkpoint, as PyTorch users
do. A run at another world size loads the list of them (or the merged state
merge_states() makes, one object to store) into every new rank: the samples
no old rank delivered in the interrupted epoch are then delivered once
across the new ranks (docs/ddp.md). A state is a few integers per rank: the
merged one holds each old rank's delivered sample count and the ranges of
the epoch's sequence they were splitting, never a list of samples.
"""

# What every rank's state must hold for a merge (Loader.state_dict()).
_KEYS = ("epoch", "batch", "seed", "rank", "world_size", "dataset", "batch_size", "remaining",
         "ranks_per_node")


def ranges(value):
    """Ranges as (begin, end) tuples of ints (a state read back from JSON has lists)."""
    return None if value is None else [tuple(int(x) for x in r) for r in value]


def merge_states(states):
    """One state out of the state_dict() of every rank of a run (any order):
    what Loader.load_state_dict() takes at any world size. Refuses (a
    ValueError naming what is wrong) a set that is not all the ranks of one
    run at one point: a rank missing or given twice, states of different
    epochs, seeds, world sizes or datasets (URLs and options that shape the
    sample sequence)."""
    if isinstance(states, dict) and states.get("merged"):
        return states  # merged already (and read back from a checkpoint)
    if isinstance(states, dict):
        states = [states]
    states = list(states)
    if not states:
        raise ValueError("merge_states: no states given (pass every rank's state_dict())")
    for i, state in enumerate(states):
        missing = [k for k in _KEYS if not isinstance(state, dict) or k not in state]
        if missing:
            raise ValueError(f"merge_states: state {i} is not a stoker Loader state_dict() of "
                             f"this version (it lacks {', '.join(missing)})")
    first = states[0]
    for key, what in (("world_size", "world sizes"), ("epoch", "epochs"), ("seed", "seeds"),
                      ("dataset", "datasets (URLs or options that shape the sequence)"),
                      ("batch_size", "batch sizes"), ("remaining", "resumed epochs"),
                      ("remaining_nodes", "resumed epochs"),
                      ("ranks_per_node", "node affinity (ranks per node)"),
                      ("global_order", "orders (global or shuffle window)")):
        values = {}
        for s in states:  # ranges read back from JSON are lists: compared as tuples
            value = s.get(key)  # remaining_nodes, global_order: not in older states
            values.setdefault(repr(ranges(value) if key == "remaining" else value), s["rank"])
        if len(values) > 1:
            shown = ", ".join(f"rank {rank}: {value}" for value, rank in values.items())
            raise ValueError(f"merge_states: the states are of different {what} ({shown}): "
                             "give the states all ranks saved at the same step of one run")
    world = int(first["world_size"])
    ranks = sorted(int(s["rank"]) for s in states)
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    if twice:
        raise ValueError(f"merge_states: rank {', '.join(map(str, twice))} given twice")
    absent = sorted(set(range(world)) - set(ranks))
    if absent or len(ranks) != world:
        raise ValueError(f"merge_states: the set is incomplete: rank "
                         f"{', '.join(map(str, absent))} of {world} missing (every rank's "
                         "state is needed: what each delivered is known only from its own)")
    by_rank = {int(s["rank"]): s for s in states}
    batch_size = int(first["batch_size"])
    return {"merged": True, "epoch": int(first["epoch"]), "seed": first["seed"],
            "dataset": first["dataset"], "world_size": world,
            "delivered": [int(by_rank[r]["batch"]) * batch_size for r in range(world)],
            "remaining": ranges(first["remaining"]),
            "remaining_nodes": int(first.get("remaining_nodes", 1)),
            "ranks_per_node": int(first["ranks_per_node"]),
            "global_order": first.get("global_order")}


def nodes(merged):
    """Whose sequences the ranges left after merged are of: the old nodes'
    (one after the other) when the old ranks split a whole epoch under node
    affinity, else those the ranges they split were of (1: the one
    sequence of an epoch without affinity)."""
    if merged["remaining"] is None and merged["ranks_per_node"]:
        return merged["world_size"] // merged["ranks_per_node"]
    return merged.get("remaining_nodes", 1)


def is_merged(state):
    """A merged state or a list of states, rather than one rank's."""
    return not isinstance(state, dict) or bool(state.get("merged"))


def check(merged, dataset, seed, global_order):
    """Refuse merged states that cannot resume a loader of this dataset
    fingerprint, seed and order kind."""
    if merged["dataset"] != dataset:
        raise ValueError("these loader states were saved by a loader with other URLs or options "
                         "that shape the sample sequence (shuffle, transform, fields, index "
                         "contents, the global order a node cache holding the shards gives "
                         "...); they cannot resume this one")
    if merged["seed"] != seed:
        raise ValueError(f"these loader states were saved with seed={merged['seed']}, this "
                         f"loader has seed={seed}")
    # Where the old ranks read a window and this loader the global order
    # (remote shards through a node cache that holds a node's shards at
    # this node count, not at the old one), the counts would be read as
    # prefixes of runs they are not; the other way the C loader refuses.
    if merged.get("global_order") is False and global_order:
        raise ValueError(
            "these loader states were saved under a shuffle window, this loader reads the "
            "global order (with remote shards a node cache serves it only where it holds a "
            "node's shards, which depends on the node count): what the old ranks delivered "
            "is not known from their counts")


def share(remaining, rank, world, uneven):
    """Samples rank of world yields from the ranges left (as the C plan
    splits them: equal shares of ceil(R / world), or uneven's runs)."""
    total = sum(end - begin for begin, end in remaining)
    if uneven:
        return (rank + 1) * total // world - rank * total // world
    return -(-total // world)
