# SPDX-License-Identifier: MIT
"""No option is accepted and ignored (issue 38): every row of the option
table, set to a value other than its default, in every mode of
stoker.Loader (transform train / eval / None with map=, shuffle on and
off, each augmentation family, Mixup/CutMix, fields=, hooks), either
changes what the loop gets (the bytes of every tensor, the other values of
each batch, or the error the epoch ends with) or is refused with
stoker.OptionError. The options the table marks speed_only are the other
way round: they must leave the batches as they are (or be refused), as
must shards_in_flight without shuffling (SPEED_UNSHUFFLED).

A hook process costs seconds to start, so the hook modes run end to end
only the options the hook path reads or that shape what the hook gets
(HOOK_PATH); under map= the others reach the hook through the C loader of
"train" (walked there), under transform=None they are walked through the C
loader alone, on its raw samples.

The dataset is tiny (3 shards of 5 samples of 64x48 noise, each with a
label in .cls, another in .lbl and .json, a caption in .txt; one sample
carries a 20 KB .bin member that the on_error probe makes bad), so one
epoch is read per probe.

Not walked, and why (EXEMPT below, by option and mode):
- transform: it is the mode itself.
- index_path, uneven, node_affinity, ranks_per_node: with one rank they
  change how fast a resume reaches its batch and what len() knows, or how
  ranks and nodes share, never the batches of a single rank (test_index.py,
  test_distributed.py, test_node_affinity.py walk their effect over ranks);
  a script runs the same options on one rank and on many.
- seed and epoch where nothing is drawn (eval without shuffle, no hook):
  they name the run (the loader state carries them) and key every draw; a
  script keeps its seed when it turns shuffling off for evaluation.
- max_image_pixels with transform=None: the hook's own decode is being
  made to honour it (another change); until then it is not decoded by C.
- cluster=: Dask workers make the batches of a local run, byte for byte,
  for any options (test_cluster.py), and every refusal here happens in
  Loader() before the scheduler is reached; a scheduler per probe would
  take minutes.
stoker.Loader's own keywords (hook_timeout, batches_per_task, ...) are
walked by test_option_pairs.py (_scope.LOADER_NEEDS).
"""
import hashlib
import io
import json
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

import hook_fns
import stoker

TABLE = {o["name"]: o for o in stoker._ext._stoker.options()}
BASE = dict(batch_size=4, threads=1, seed=3)
TRAIN = dict(transform="train", image_size=12)
MODES = {
    "train": TRAIN,
    "eval": dict(transform="eval", image_size=12),
    "eval-unshuffled": dict(transform="eval", image_size=12, shuffle=False),
    "train-unshuffled": dict(TRAIN, shuffle=False),
    "ta_wide": dict(TRAIN, auto_augment="ta_wide"),
    "randaugment": dict(TRAIN, auto_augment="ra"),
    "imagenet": dict(TRAIN, auto_augment="imagenet"),
    "blur": dict(TRAIN, blur_kernel=3),
    "erase": dict(TRAIN, random_erase=0.5),
    "float": dict(TRAIN, dtype="float32"),
    "mixing": dict(TRAIN, mixup_alpha=0.5, cutmix_alpha=1.0),
    "fields": dict(TRAIN, fields=("jpg", "__label__", "__key__", "txt")),
    "map": dict(TRAIN, map=hook_fns.identity),
    "transform-none": dict(transform=None, map=hook_fns.crop_whole),
}
# A value other than the default for each option; where a mode sets the
# option to that value itself, OTHER gives another.
PROBE = {
    "batch_size": 3, "drop_last": True, "threads": 2, "shards_in_flight": 1,
    "shuffle_buffer": 3, "shuffle_buffer_bytes": 1 << 33, "shuffle": False, "seed": 11,
    "epoch": 1, "rank": 1, "world_size": 2, "samples_per_rank": 8, "on_error": "skip",
    "read_buffer_bytes": 4096, "prefetch_bytes_per_shard": 1, "max_batches": 9,
    "max_member_bytes": 100, "max_members_per_sample": 1, "max_key_bytes": 2,
    "max_samples_per_shard": 2, "image_size": 10, "dtype": "float32", "layout": "nhwc",
    "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5), "scale_min": 0.5, "scale_max": 0.6,
    "ratio_min": 0.9, "ratio_max": 1.1, "flip_probability": 0.0, "label_exts": "lbl",
    "label_json_field": "y", "max_image_pixels": 100, "full_decode": True, "dct_margin": 8,
    "recipe": "torchvision-v2", "eval_resize": 20, "interpolation": "bicubic", "ra_reps": 2,
    "auto_augment": "ta_wide", "augment_interpolation": "bilinear",
    "augment_magnitude_bins": 11, "ra_num_ops": 3, "ra_magnitude": 5, "color_jitter": 0.4,
    "hue_jitter": 0.2, "grayscale_probability": 0.5, "blur_kernel": 5, "blur_sigma_min": 0.5,
    "blur_sigma_max": 1.0, "random_erase": 1.0, "random_erase_value": "random",
    "mixup_alpha": 2.0, "cutmix_alpha": 0.5, "num_classes": 300,
    "mix_switch_probability": 0.3, "cache_dir": "(tmp_path)", "cache_size": 1 << 30,
    "io_timeout_ms": 5000, "io_retries": 1, "io_backoff_ms": 10, "io_min_rate": 1,
    "allow_pipe": True, "ca_bundle": "/etc/ssl/certs/ca-certificates.crt",
    "image_height": 10, "image_width": 14, "require_members": "nope",
    "whole_shards": True, "window_shuffle": True, "epochs": 1, "sequential_start": True,
}
OTHER = {"shuffle": True, "auto_augment": "imagenet", "dtype": "bfloat16"}
EXEMPT = {
    ("transform", None): "the mode itself",
    ("index_path", None): "one rank: resume speed and len(), not the batches",
    ("uneven", None): "one rank: nothing is shared between ranks",
    ("node_affinity", None): "one rank: one node (test_node_affinity.py, test_nodes.py)",
    ("ranks_per_node", None): "one rank: one node (test_node_affinity.py, test_nodes.py)",
    ("seed", "eval-unshuffled"): "nothing is drawn: the seed names the run",
    ("epoch", "eval-unshuffled"): "nothing is drawn: the epoch names the run",
    ("max_image_pixels", "transform-none"): "the hook's decode is being made to honour it",
}
# What the hook modes run end to end (see the module's doc).
HOOK_PATH = {"batch_size", "drop_last", "seed", "epoch", "on_error", "label_exts",
             "label_json_field", "layout", "dtype", "image_size", "max_batches", "threads",
             "require_members", "samples_per_rank", "shuffle"}
WALKED_WITHOUT_HOOK = {"map": "train"}
# Without shuffling the shards in flight are read in turn, one after the
# other: more of them read the next ones ahead (speed), the same batches.
SPEED_UNSHUFFLED = {"shards_in_flight"}
# Where the probe needs something beside it to show what it does: options
# given to both runs, and the shard URLs turned into pipes for allow_pipe.
WITNESS = {"on_error": dict(max_member_bytes=10000)}


def write_dataset(out):
    rng = np.random.default_rng(5)
    paths = []
    for s in range(3):
        path = out / f"walk-{s}.tar"
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            for i in range(5):
                n = 5 * s + i
                buf = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(
                    buf, "JPEG", quality=75)
                members = {"jpg": buf.getvalue(), "cls": str(n).encode(),
                           "lbl": str(n + 100).encode(),
                           "json": json.dumps({"y": n + 200}).encode(),
                           "txt": f"caption {n}".encode()}
                if n == 7:
                    members["bin"] = bytes(20000)
                for ext in sorted(members):
                    info = tarfile.TarInfo(f"{n:04d}.{ext}")
                    info.size = len(members[ext])
                    tar.addfile(info, io.BytesIO(members[ext]))
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("walk"))


def digest(value, h):
    if isinstance(value, torch.Tensor):
        h.update(repr((value.dtype, tuple(value.shape))).encode())
        h.update(value.contiguous().view(torch.uint8).numpy().tobytes() if value.numel() else b"")
    elif isinstance(value, (tuple, list)):
        h.update(b"(")
        for v in value:
            digest(v, h)
        h.update(b")")
    else:
        h.update(repr(value).encode())


def outcome(urls, options):
    """'refused', or what one epoch gave: ('ok', digest of every batch) or
    ('error', the error type and message) when the epoch ended in one."""
    try:
        loader = stoker.Loader(urls, **options)
    except stoker.OptionError:
        return "refused"
    except Exception as e:  # noqa: BLE001 (what the loader says is the outcome)
        return ("error", type(e).__name__, str(e))
    h = hashlib.sha256()
    try:
        with loader:
            for batch in loader:
                digest(batch, h)
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))
    return ("ok", h.hexdigest())


def raw_outcome(urls, options):
    """outcome() of the C loader alone at transform=None: its raw samples."""
    try:
        c = stoker._ext._stoker.Loader(urls, transform="none", **options)
    except stoker.OptionError:
        return "refused"
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))
    h = hashlib.sha256()
    try:
        while (b := c.next()) is not None:
            digest([sorted(s.items()) for s in b.samples()], h)
            del b
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))
    finally:
        c.close()
    return ("ok", h.hexdigest())


def exempt(name, mode):
    return EXEMPT.get((name, None)) or EXEMPT.get((name, mode))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_option_acts_or_is_refused(shards, tmp_path, mode):
    assert set(PROBE) | {n for n, _ in EXEMPT} == set(TABLE), "give a new option its probe"
    spelled = {"index_path": "index"}  # Loader's keyword where it differs
    cache = str(tmp_path / "cache")
    plain = outcome(shards, dict(BASE, **MODES[mode]))
    assert plain[0] == "ok", plain  # else every probe would compare errors
    bases, ignored, moved = {}, [], []
    hooked = "map" in MODES[mode]
    for name in sorted(TABLE):
        if exempt(name, mode) or (hooked and name not in HOOK_PATH and
                                  mode in WALKED_WITHOUT_HOOK):
            continue
        run = outcome
        base = dict(BASE, **MODES[mode], **WITNESS.get(name, {}))
        if hooked and name not in HOOK_PATH:  # transform=None: the C loader's samples
            run = raw_outcome
            base = {k: v for k, v in base.items() if k not in ("transform", "map")}
        value = cache if name == "cache_dir" else \
            next(v for v in (PROBE[name], OTHER.get(name)) if v != base.get(name))
        urls = shards
        if name == "allow_pipe":  # the permission shows on pipe: URLs
            urls = [f"pipe:cat {s}" for s in shards]
        key = (run, tuple(urls), repr(sorted(base.items())))
        if key not in bases:
            bases[key] = run(urls, base)
        got = run(urls, dict(base, **{spelled.get(name, name): value}))
        if got == "refused":
            continue
        if TABLE[name]["speed_only"] or (name in SPEED_UNSHUFFLED and
                                         base.get("shuffle") is False):
            if got != bases[key]:
                moved.append(f"{name}={value!r}: {got} vs {bases[key]}")
        elif got == bases[key]:
            ignored.append(f"{name}={value!r}")
    assert not ignored, f"mode {mode}: accepted and ignored (same outcome): {ignored}"
    assert not moved, f"mode {mode}: speed-only options changed the batches: {moved}"
