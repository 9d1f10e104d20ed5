# SPDX-License-Identifier: MIT
"""Which options of the one option table each entry point uses: an option
an entry point would accept and not act on is refused there, naming it,
instead of being ignored (a Samples given transform="train" yielded raw
bytes; a verify given batch_size= checked the same).

Every row of the table is either used by an entry point or listed in what
it refuses; tests/python/test_habits2.py walks the table to keep it so.

Options that act only beside another (scale_min under transform="eval",
cache_size without cache_dir) are refused by the C loader itself, from the
rules the option table's rows carry (options()[i]["needs"], src/option_rules.c),
so the command line refuses them too; the keywords of stoker.Loader that
the table does not hold have their rules here (LOADER_NEEDS).
tests/python/test_option_pairs.py walks both."""
from .._ext._stoker import OptionError, options

# Options that shape decoded image batches only.
IMAGE_BATCH = frozenset((
    "transform", "image_size", "image_height", "image_width", "dtype", "layout", "mean", "std",
    "scale_min", "scale_max", "ratio_min", "ratio_max", "flip_probability", "full_decode",
    "dct_margin", "max_image_pixels", "batch_size", "drop_last", "max_batches"))
# Labels are read into image batches only.
LABELS = frozenset(("label_exts", "label_json_field"))

# stoker.Samples yields every member of every sample as bytes, one epoch
# per iteration; require_members is checked where images are decoded.
SAMPLES_REFUSES = IMAGE_BATCH | LABELS | frozenset(("epoch", "require_members"))
SAMPLES_WHY = ("stoker.Samples yields raw samples (every member as bytes): decode them in your "
               "code, or use stoker.Loader for decoded image batches")

# stoker.verify reads each sample once, in storage order, decoding whole
# images; it never stops at bad data. It reads shards themselves, never
# through the node cache (cache_dir was taken and ignored).
VERIFY_USES = frozenset((
    "threads", "label_exts", "label_json_field", "max_image_pixels", "require_members",
    "max_member_bytes", "max_members_per_sample", "max_key_bytes", "max_samples_per_shard",
    "read_buffer_bytes", "io_timeout_ms", "io_retries",
    "io_backoff_ms", "io_min_rate", "allow_pipe", "ca_bundle"))
# ... of which these act only while it decodes images (images=True), and
# the label options only while it checks labels (labels=True).
VERIFY_IMAGES = frozenset(("label_exts", "label_json_field", "max_image_pixels",
                           "require_members"))
VERIFY_LABELS = LABELS
VERIFY_WHY = ("stoker.verify reads every sample once in storage order and decodes whole images; "
              "it takes the options that decide what is bad input, and the reading options")


# stoker.Loader keywords outside the option table that act only beside
# another: name -> (the keywords any of which it needs, in words).
LOADER_NEEDS = {
    "batches_per_task": (("cluster",), "cluster= (it sizes the Dask workers' tasks)"),
    "prometheus_host": (("prometheus_port",), "prometheus_port= (it says where metrics are "
                                              "served)"),
    "hook_processes": (("map", "batch_map"), "map= or batch_map= (it runs those hooks)"),
    "hook_timeout": (("map", "batch_map"), "map= or batch_map= (it limits those hooks)"),
    "map_shape": (("map",), "map= (it is the shape of what map= returns)"),
}


def refuse_alone(where, given):
    """OptionError naming the first keyword of given (name -> value, None:
    not given) whose rule in LOADER_NEEDS does not hold."""
    for name, (needs, words) in LOADER_NEEDS.items():
        if given.get(name) is not None and all(given.get(n) is None for n in needs):
            raise OptionError(f"{where}: {name}= acts only with {words}: leave it out here "
                              "(a loader refuses an option it would ignore)")


def refuse(where, given, refused, why):
    """OptionError naming the first option of given that where refuses."""
    for name in sorted(set(given) & refused):
        raise OptionError(f"{where} does not use {name}=: {why}")


def refuse_unused(where, given, uses, why):
    """OptionError naming the first option of the table in given that
    where does not use (unknown names are left to the option parser)."""
    table = {o["name"] for o in options()}
    refuse(where, given, table - uses, why)

