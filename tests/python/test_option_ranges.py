# SPDX-License-Identifier: MIT
"""Integer options never wrap: a value outside the range the C library's
option table gives (which lies within its C field: int, unsigned, size_t or
uint64_t) is a ValueError (stoker.OptionError) naming the option and its
range, for Loader, verify() and ShardWriter alike, never a smaller number
that then passes validation."""
import pytest

import stoker

U32 = 2**32
U64 = 2**64

# The integer options of the table, with their ranges.
INTEGERS = {o["name"]: o for o in stoker._ext._stoker.options() if o["type"] == "int"}
BOOLS = [o["name"] for o in stoker._ext._stoker.options() if o["type"] == "bool"]


def c_loader(urls, **kw):
    """The C loader directly: the Python layer converts some options first."""
    return stoker._ext._stoker.Loader(urls, **kw)


@pytest.mark.parametrize("name", sorted(INTEGERS))
def test_integer_options_refuse_what_is_out_of_range(even_shards, name):
    o = INTEGERS[name]
    low, top, default = o["min"], o["max"], stoker.loader.options_doc._default_value(o)
    for value in (top + 1, top + 1 + 32, U32 + 1, U64, U64 + 1, low - 1, -(2**63), -(2**70)):
        if low <= value <= top or value == default:
            continue
        with pytest.raises(ValueError) as info:
            c_loader(even_shards, **{name: value})
        message = str(info.value)
        assert name in message and str(top) in message and str(low) in message, message
        assert isinstance(info.value, stoker.OptionError) and info.value.code == -22


def test_the_tables_ranges_fit_the_c_fields():
    """Every range lies within its field (int, unsigned or 64 bits): a value
    that passes the check is stored whole."""
    for name, o in INTEGERS.items():
        assert o["max"] <= U64 - 1 and o["min"] >= -(2**31), name
    for name in ("threads", "shards_in_flight", "image_size", "io_timeout_ms", "io_retries",
                 "io_backoff_ms", "io_min_rate", "image_height", "image_width"):
        assert INTEGERS[name]["max"] <= U32 - 1, name
    for name in ("rank", "world_size"):
        assert INTEGERS[name]["max"] == 2**31 - 1, name


@pytest.mark.parametrize("name", BOOLS)
def test_bool_options_take_0_and_1(even_shards, name):
    for value in (2, 2**31, U32 + 1, U64, -1, -(2**31) - 1):
        with pytest.raises(ValueError) as info:
            c_loader(even_shards, **{name: value})
        assert name in str(info.value) and "0 or 1" in str(info.value), str(info.value)


@pytest.mark.parametrize("name", ["rank", "world_size"])
def test_rank_and_world_size_range(even_shards, name):
    for value in (2**31, U32 - 1, U32 + 1, -2, -(2**31) - 1, -(2**80)):
        with pytest.raises(ValueError) as info:
            c_loader(even_shards, **{name: value})
        message = str(info.value)
        assert name in message and "-1" in message and str(2**31 - 1) in message, message


def test_the_reported_wraps_are_refused(even_shards):
    """threads=2**32+1 used to become 1 thread; image_size=2**32+32 became 32
    and passed the size check."""
    with pytest.raises(ValueError, match="threads"):
        stoker.Loader(even_shards, threads=U32 + 1)
    with pytest.raises(ValueError, match="image_size"):
        stoker.Loader(even_shards, image_size=U32 + 32)
    with pytest.raises(ValueError, match="threads"):
        stoker.verify(even_shards, threads=U32 + 1)
    with pytest.raises(ValueError, match="max_image_pixels"):
        stoker.verify(even_shards, max_image_pixels=U64 + 5)


def test_values_that_fit_are_kept(even_shards):
    """The largest values of each field pass the conversion (the loader's
    own checks then decide), and non-int types are TypeErrors."""
    c_loader(even_shards, seed=U64 - 1, epoch=U64 - 1, samples_per_rank=U64 - 1,
             cache_size=0, max_image_pixels=U64 - 1, rank=-1, world_size=-1)
    with pytest.raises(ValueError, match="threads must be between 1 and 1024"):
        c_loader(even_shards, threads=U32 - 1)  # fits: the loader's own check speaks
    for bad in (2.0, "2", None):
        with pytest.raises(TypeError):
            c_loader(even_shards, threads=bad)


def test_shard_writer_limits(tmp_path):
    for kw in (dict(max_samples=-1), dict(max_samples=U64), dict(max_bytes=-5),
               dict(max_bytes=U64 + 100)):
        name = next(iter(kw))
        with pytest.raises(ValueError) as info:
            stoker.ShardWriter(str(tmp_path / "w-%d.tar"), **kw)
        assert name in str(info.value) and str(U64 - 1) in str(info.value)
    with stoker.ShardWriter(str(tmp_path / "ok-%d.tar"), max_samples=U64 - 1,
                            max_bytes=U64 - 1) as w:
        w.write({"__key__": "a", "txt": "x"})
    assert (tmp_path / "ok-0.tar").exists()


def test_seek_refuses_negative_and_huge(even_shards):
    c = c_loader(even_shards, transform="eval", image_size=16)
    for epoch, batch in ((-1, 0), (0, -1), (U64, 0), (0, U64)):
        with pytest.raises(ValueError, match="epoch|batch"):
            c.seek(epoch, batch)
    c.seek(U64 - 1, 0)
    c.close()


def test_byte_options_take_the_units_the_cli_takes(even_shards):
    """max_member_bytes="1K" is 1024 bytes, as `--max-member-bytes 1K` is:
    the C parser reads the text, so Python and the CLI share one rule."""
    loader = c_loader(even_shards, max_member_bytes="1K", transform="eval", image_size=32)
    with pytest.raises(stoker.DataError, match="above the limit of 1024 "):
        loader.next()
    c_loader(even_shards, shuffle_buffer_bytes="4G").close()
    with pytest.raises(stoker.OptionError, match="K, M, G, T"):
        c_loader(even_shards, shuffle_buffer_bytes="4X")
    with pytest.raises(TypeError, match="batch_size must be an int"):
        c_loader(even_shards, batch_size="4K")  # units are for byte counts only


@pytest.mark.parametrize("name", ["batch_size", "threads", "max_batches", "cache_size"])
def test_integer_options_refuse_bools(even_shards, name):
    """batch_size=True is a mistake, not a batch of 1."""
    with pytest.raises(TypeError, match=f"{name} must be an int.*not bool True"):
        c_loader(even_shards, **{name: True})
    with pytest.raises(TypeError, match="image_size must be an int, not bool"):
        c_loader(even_shards, image_size=(True, True))


def test_threads_0_means_the_default(even_shards):
    """stoker.Loader(threads=0) is threads=None, as documented: this rank's
    share of the cores; the C loader itself refuses 0."""
    assert "threads=None or 0" in stoker.Loader.__doc__
    with stoker.Loader(even_shards, threads=0, batch_size=8, image_size=32) as loader:
        images, _ = next(iter(loader))
        assert images.shape[0] == 8
    with pytest.raises(stoker.OptionError, match="threads must be between 1"):
        c_loader(even_shards, threads=0)


# Every option that takes a real number: the table's float and float3 rows,
# and stoker.Loader's own numeric keywords.
FLOATS = sorted(o["name"] for o in stoker._ext._stoker.options()
                if o["type"] in ("float", "float3"))
NON_FINITE = (float("nan"), float("inf"), float("-inf"))


@pytest.mark.parametrize("name", FLOATS)
def test_float_options_refuse_nan_and_inf(even_shards, name):
    """A nan passed every range check written as a comparison (0 <= nan <=
    1 is false, but so is nan < 0) and reached the augmentations; inf has
    no meaning for any of them. Refused by the C parser for the Python
    module and the command line alike, naming the option."""
    kind = next(o["type"] for o in stoker._ext._stoker.options() if o["name"] == name)
    for bad in NON_FINITE:
        value = (0.5, bad, 0.5) if kind == "float3" else bad
        for make in (c_loader, stoker.Loader):
            with pytest.raises(stoker.OptionError) as info:
                make(even_shards, transform="train", **{name: value})
            message = str(info.value)
            assert f"{name} must be " in message and "finite" in message, message


def test_hook_timeout_refuses_nan_and_inf(even_shards):
    """hook_timeout=nan was taken: no limit, and the trainer's hook thread
    polled its processes with a zero timeout (nan <= 0 is false)."""
    from hook_fns import augment
    for bad in NON_FINITE + (0, -1.0):
        with pytest.raises(stoker.OptionError, match="hook_timeout must be a finite number"):
            stoker.Loader(even_shards, transform="eval", image_size=16, map=augment,
                          hook_timeout=bad)


def test_batches_per_task_refuses_what_is_no_count(even_shards, tmp_path):
    """batches_per_task=2.5 ran as 2 and nan failed inside int() without
    naming the option; refused before any scheduler is reached."""
    for bad in NON_FINITE + (2.5, 0, True):
        with pytest.raises(stoker.OptionError, match="batches_per_task must be an int >= 1"):
            stoker.Loader(even_shards, transform="eval", image_size=16,
                          cluster="tcp://127.0.0.1:9", index=str(tmp_path / "i.json"),
                          batches_per_task=bad)
