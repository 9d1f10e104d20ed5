"""Which options of the one option table each entry point uses: an option
an entry point would accept and not act on is refused there, naming it,
instead of being ignored (a Samples given transform="train" yielded raw
bytes; a verify given batch_size= checked the same).

Every row of the table is either used by an entry point or listed in what
it refuses; tests/python/test_habits2.py walks the table to keep it so."""
from ._stoker import OptionError, options

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
# images; it never stops at bad data.
VERIFY_USES = frozenset((
    "threads", "label_exts", "label_json_field", "max_image_pixels", "require_members",
    "max_member_bytes", "max_members_per_sample", "max_key_bytes", "max_samples_per_shard",
    "read_buffer_bytes", "cache_dir", "cache_size", "io_timeout_ms", "io_retries",
    "io_backoff_ms", "io_min_rate", "allow_pipe", "ca_bundle"))
VERIFY_WHY = ("stoker.verify reads every sample once in storage order and decodes whole images; "
              "it takes the options that decide what is bad input, and the reading options")


def refuse(where, given, refused, why):
    """OptionError naming the first option of given that where refuses."""
    for name in sorted(set(given) & refused):
        raise OptionError(f"{where} does not use {name}=: {why}")


def refuse_unused(where, given, uses, why):
    """OptionError naming the first option of the table in given that
    where does not use (unknown names are left to the option parser)."""
    table = {o["name"] for o in options()}
    refuse(where, given, table - uses, why)

