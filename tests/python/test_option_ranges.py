"""Integer options never wrap: a value that does not fit its C field (int,
unsigned, size_t or uint64_t) is a ValueError naming the option and its
range, for Loader, verify() and ShardWriter alike, never a smaller number
that then passes validation."""
import pytest

import stoker

U32 = 2**32
U64 = 2**64

# option -> the largest value its C field holds (every one of them also
# refuses U64 and anything below its minimum).
UNSIGNED_FIELDS = {
    "threads": U32 - 1, "shards_in_flight": U32 - 1, "image_size": U32 - 1,
    "io_timeout_ms": U32 - 1, "io_retries": U32 - 1, "io_backoff_ms": U32 - 1,
    "batch_size": U64 - 1, "shuffle_buffer": U64 - 1, "max_batches": U64 - 1,
    "prefetch_bytes_per_shard": U64 - 1, "read_buffer_bytes": U64 - 1,
    "max_members_per_sample": U64 - 1, "max_key_bytes": U64 - 1,
    "seed": U64 - 1, "epoch": U64 - 1, "samples_per_rank": U64 - 1,
    "max_image_pixels": U64 - 1, "max_member_bytes": U64 - 1, "cache_size": U64 - 1,
}
INT_FIELDS = ["drop_last", "shuffle", "full_decode", "allow_pipe"]


def c_loader(urls, **kw):
    """The C loader directly: the Python layer converts some options first."""
    return stoker._stoker.Loader(urls, **kw)


@pytest.mark.parametrize("name", sorted(UNSIGNED_FIELDS))
def test_unsigned_options_refuse_what_does_not_fit(even_shards, name):
    top = UNSIGNED_FIELDS[name]
    for value in (top + 1, top + 1 + 32, U64, U64 + 1, -1, -(2**63), -(2**70)):
        if value == top + 1 + 32 and top == U64 - 1:
            continue
        with pytest.raises(ValueError) as info:
            c_loader(even_shards, **{name: value})
        message = str(info.value)
        assert name in message and str(top) in message, message


@pytest.mark.parametrize("name", INT_FIELDS)
def test_int_options_refuse_what_does_not_fit(even_shards, name):
    for value in (2**31, U32 + 1, U64, -1, -(2**31) - 1):
        with pytest.raises(ValueError) as info:
            c_loader(even_shards, **{name: value})
        message = str(info.value)
        assert name in message and str(2**31 - 1) in message, message


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
