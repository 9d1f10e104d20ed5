# SPDX-License-Identifier: MIT
"""Options that act only beside another (scale_min under transform="eval",
cache_size without cache_dir, batches_per_task without cluster=, ...) were
taken and ignored. They are refused where they would not act, naming the
option and what it needs, and taken where they act: walked over the option
table's rules (options()[i]["needs"]) through the C loader, stoker.Loader
and `stoker bench`, and over stoker.Loader's own keywords (_scope.LOADER_NEEDS)."""
import re
import subprocess

import pytest

import stoker
from stoker.loader import scope as _scope

TABLE = {o["name"]: o for o in stoker._ext._stoker.options()}
RULED = sorted(name for name, o in TABLE.items() if o["needs"])

# A value other than the default, valid wherever the option acts.
VALUES = {
    "image_size": 24, "image_height": 24, "image_width": 20, "dtype": "float32",
    "layout": "nhwc", "full_decode": 1, "recipe": "torchvision-v2", "mean": (0.5, 0.5, 0.5),
    "std": (0.5, 0.5, 0.5), "dct_margin": 2, "scale_min": 0.5, "scale_max": 0.9,
    "ratio_min": 0.5, "ratio_max": 2.0, "flip_probability": 0.2, "auto_augment": "ta_wide",
    "color_jitter": 0.2, "hue_jitter": 0.1, "grayscale_probability": 0.1, "blur_kernel": 3,
    "random_erase": 0.25, "mixup_alpha": 0.2, "cutmix_alpha": 1.0,
    "augment_interpolation": "bilinear", "augment_magnitude_bins": 11, "ra_num_ops": 3,
    "ra_magnitude": 5, "blur_sigma_min": 0.2, "blur_sigma_max": 1.0, "num_classes": 10,
    "mix_switch_probability": 0.3, "eval_resize": 40, "cache_size": 1 << 26,
    "random_erase_value": "random", "interpolation": "bicubic", "shuffle_buffer": 10,
    "require_members": "cls", "whole_shards": 1,
    "window_shuffle": 1,
    "ranks_per_node": 1,
}


def contexts(cache_dir, index):
    """Each rule in words -> (options where it does not hold, where it does);
    index: a dataset index of the shards."""
    train = dict(transform="train")
    return {
        "index_path (a dataset index)": (dict(transform="none"),
                                         dict(transform="none", index_path=index)),
        "index_path (a dataset index) and shuffle": (
            dict(transform="none", index_path=index, shuffle=0),
            dict(transform="none", index_path=index)),
        "transform=train or eval": (dict(transform="none"), dict(transform="eval")),
        "transform=train": (dict(transform="eval"), train),
        "transform=eval": (train, dict(transform="eval")),
        "cache_dir": (dict(transform="eval"), dict(transform="eval", cache_dir=cache_dir)),
        "node_affinity other than 0": (dict(node_affinity=0), dict(node_affinity=1)),
        "a float dtype (uint8 batches are not normalized)": (
            dict(transform="eval"), dict(transform="eval", dtype="float32")),
        "a float dtype (uint8 batches are not normalized), or random_erase under "
        "transform=train": (train, dict(train, random_erase=0.5)),
        "transform=train or eval without full_decode": (
            dict(transform="eval", full_decode=1), dict(transform="eval")),
        "auto_augment (or recipe) under transform=train": (
            train, dict(train, auto_augment="ta_wide")),
        "auto_augment=ta_wide or ra (or recipe) under transform=train (AutoAugment's imagenet "
        "policy has its own 10 bins)": (
            dict(train, auto_augment="imagenet"), dict(train, auto_augment="ta_wide")),
        "random_erase (or recipe) under transform=train": (train, dict(train, random_erase=0.5)),
        "shuffle": (dict(transform="eval", shuffle=0), dict(transform="eval")),
        "auto_augment=ra under transform=train": (
            dict(train, auto_augment="ta_wide"), dict(train, auto_augment="ra")),
        "blur_kernel under transform=train": (train, dict(train, blur_kernel=3)),
        "mixup_alpha or cutmix_alpha (or recipe) under transform=train": (
            train, dict(train, cutmix_alpha=1.0)),
        "both mixup_alpha and cutmix_alpha (or recipe) under transform=train": (
            dict(train, mixup_alpha=0.2), dict(train, mixup_alpha=0.2, cutmix_alpha=1.0)),
    }


def refused(name, needs):
    return re.escape(f"{name} is set but acts only with {needs}")


def test_the_table_has_rules_for_the_pairs_the_issue_names():
    assert {"scale_min", "flip_probability", "random_erase", "mixup_alpha", "eval_resize",
            "cache_size", "ra_num_ops", "blur_sigma_min"} <= set(RULED)
    assert TABLE["scale_min"]["needs"] == "transform=train"
    assert TABLE["batch_size"]["needs"] is None and TABLE["threads"]["needs"] is None
    # issue 38: accepted and ignored (same bytes with and without them)
    assert {"random_erase_value", "interpolation", "shuffle_buffer",
            "require_members"} <= set(RULED)
    # The member bytes in flight count against it, with or without shuffle.
    assert TABLE["shuffle_buffer_bytes"]["needs"] is None
    assert "imagenet policy has its own 10 bins" in TABLE["augment_magnitude_bins"]["needs"]
    # shards_in_flight reads ahead without shuffling (speed); max_image_pixels
    # acts on transform=None's hook decode
    assert TABLE["shards_in_flight"]["needs"] is None
    assert TABLE["max_image_pixels"]["needs"] is None


@pytest.fixture(scope="module")
def even_index(even_shards, stoker_bin, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pairs") / "index.json")
    subprocess.run([stoker_bin, "index", "-o", path, *even_shards], check=True,
                   capture_output=True, timeout=60)
    return path


@pytest.mark.parametrize("name", RULED)
def test_every_rule_refuses_where_it_does_not_hold_and_acts_where_it_does(
        even_shards, even_index, tmp_path, name):
    needs = TABLE[name]["needs"]
    ctx = contexts(str(tmp_path / "cache"), even_index)
    assert needs in ctx, f"a new rule ({needs!r}): give the test its contexts"
    assert name in VALUES, f"a new ruled option: give the test a value for {name}"
    off, on = ctx[needs]
    base = dict(batch_size=4, threads=1)
    with pytest.raises(stoker.OptionError, match=refused(name, needs)):
        stoker._ext._stoker.Loader(even_shards, **dict(base, **off, **{name: VALUES[name]}))
    stoker._ext._stoker.Loader(even_shards, **dict(base, **on, **{name: VALUES[name]})).close()
    # The same default given explicitly is no request: taken anywhere.
    default = stoker.loader.options_doc._default_value(TABLE[name])
    stoker._ext._stoker.Loader(even_shards, **dict(base, **off, **{name: default})).close()
    if off.get("transform") in ("train", "eval"):  # what stoker.Loader can be asked for
        with pytest.raises(stoker.OptionError, match=refused(name, needs)):
            stoker.Loader(even_shards, image_size=16, **dict(base, **off, **{name: VALUES[name]}))
        stoker.Loader(even_shards, image_size=16, **dict(base, **on, **{name: VALUES[name]})
                      ).close()


def cli_flags(options):
    """`stoker bench` flags for options, or None when one has no flag."""
    out = []
    for name, value in options.items():
        o = TABLE[name]
        if "bench" not in o["cli_commands"]:
            return None
        if o["type"] == "bool":
            if bool(value) != (o["default"] == "1"):  # a flag defaulting to 1 is --no-NAME
                out.append(("--" if value else "--no-") + o["cli"])
        else:
            out += ["--" + o["cli"], str(value)]
    return out


def test_the_command_line_refuses_the_same(even_shards, even_index, stoker_bin, tmp_path):
    ctx = contexts(str(tmp_path / "cache"), even_index)
    tried = 0
    for name in RULED:
        off, on = ctx[TABLE[name]["needs"]]
        bad = cli_flags(dict(off, **{name: VALUES[name]}))
        good = cli_flags(dict(on, **{name: VALUES[name]}))
        if bad is None or good is None:
            continue
        tried += 1
        proc = subprocess.run([stoker_bin, "bench", *bad, even_shards[0]], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode != 0 and re.search(refused(name, TABLE[name]["needs"]),
                                                  proc.stderr), (name, bad, proc.stderr)
        proc = subprocess.run([stoker_bin, "bench", *good, even_shards[0]], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, (name, good, proc.stderr)
    assert tried >= 10


LOADER_VALUES = {"batches_per_task": 2, "prometheus_host": "127.0.0.1", "hook_processes": 1,
                 "hook_timeout": 5.0, "map_shape": (3, 4, 4)}


@pytest.mark.parametrize("name", sorted(_scope.LOADER_NEEDS))
def test_loader_keywords_that_need_another_are_refused_alone(even_shards, name):
    with pytest.raises(stoker.OptionError, match=f"{name}= acts only with "):
        stoker.Loader(even_shards, transform="eval", batch_size=4, image_size=16,
                      **{name: LOADER_VALUES[name]})


def test_prometheus_host_with_its_port_is_taken(even_shards):
    loader = stoker.Loader(even_shards, transform="eval", batch_size=4, image_size=16,
                           prometheus_port=0, prometheus_host="127.0.0.1")
    assert loader.prometheus_port > 0
    loader.close()


def test_verify_refuses_what_its_mode_ignores(even_shards):
    """verify(images=False) decodes nothing, so it checked no label or
    member (require_members was taken and ignored), and verify(labels=False)
    no label; the node cache it never read through."""
    for name, value in (("require_members", "cls"), ("label_exts", "cls"),
                        ("max_image_pixels", 10), ("label_json_field", "y")):
        with pytest.raises(stoker.OptionError, match=f"verify\\(images=False\\) does not use "
                                                     f"{name}="):
            stoker.verify(even_shards, images=False, **{name: value})
    with pytest.raises(stoker.OptionError,
                       match="verify\\(labels=False\\) does not use label_exts="):
        stoker.verify(even_shards, labels=False, label_exts="cls")
    with pytest.raises(stoker.OptionError, match="verify does not use cache_dir="):
        stoker.verify(even_shards, cache_dir="/tmp/x", cache_size=1 << 20)
    assert stoker.verify(even_shards, images=False)["problems"] == []
    assert stoker.verify(even_shards, require_members="cls")["problems"] == []
