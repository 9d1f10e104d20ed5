# SPDX-License-Identifier: MIT
"""One home per rule: the Python package asks the C library how a member
parses and which rank the launcher's environment gives, and sizes its
default threads by the cores the cgroup quota allows, as a Dask worker
does."""
import os
import sys
import types

import pytest

import stoker
from stoker.base import ranks as _ranks
from stoker._ext import _stoker


@pytest.mark.parametrize("ext,kind", [
    ("jpg", "image"), ("jpeg", "image"), ("png", "image"), ("seg.png", "image"),
    ("cls", "int"), ("x.cls2", "int"), ("id", "int"), ("txt", "text"), ("transcript", "text"),
    ("json", "json"), ("jsn", "json"), ("npy", "bytes"), ("", "bytes"), ("JPG", "bytes"),
])
def test_member_kinds_are_the_c_librarys(ext, kind):
    assert _stoker.member_kind(ext) == kind


def test_fields_take_their_kinds_from_the_c_rule():
    fields = stoker.base.fields._Fields(("jpg;png", "cls", "txt", "json", "seg.png", "__key__"))
    assert fields.columns == (("cls", "i"), ("txt", "s"), ("json", "j"), ("seg.png", "b"),
                              ("__key__", "k"))
    with pytest.raises(stoker.OptionError, match="mixes the image"):
        stoker.base.fields._Fields(("jpg;txt",))


@pytest.fixture
def launcher_env(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_ranks_from_the_environment_as_the_c_loader_reads_them(launcher_env):
    assert _ranks.rank_and_world(None, None) == (0, 1)
    launcher_env.setenv("SLURM_PROCID", "3")
    launcher_env.setenv("SLURM_NTASKS", "4")
    assert _ranks.rank_and_world(None, None) == (3, 4)
    launcher_env.setenv("RANK", "1")  # torchrun's pair comes first
    launcher_env.setenv("WORLD_SIZE", "2")
    assert _ranks.rank_and_world(None, None) == (1, 2)
    assert _ranks.rank_and_world(0, 8) == (0, 8)
    launcher_env.setenv("RANK", "one")
    with pytest.raises(stoker.OptionError, match="RANK='one' is not a valid number"):
        _ranks.rank_and_world(None, None)
    launcher_env.setenv("RANK", "5")
    with pytest.raises(stoker.OptionError, match="rank 5 is not below world size 2"):
        _ranks.rank_and_world(None, None)


def test_ranks_from_torch_xla_when_the_script_imported_it(launcher_env, even_shards):
    """Under xmp.spawn (PyTorch/XLA on Cloud TPU) no launcher variable is set:
    rank and world come from torch_xla.runtime when the script imported it
    (a stand-in module here), before the environment (issue 35)."""
    runtime = types.ModuleType("torch_xla.runtime")
    runtime.global_ordinal = lambda: 1
    runtime.world_size = lambda: 4
    launcher_env.setitem(sys.modules, "torch_xla", types.ModuleType("torch_xla"))
    launcher_env.setitem(sys.modules, "torch_xla.runtime", runtime)
    launcher_env.setenv("RANK", "0")
    launcher_env.setenv("WORLD_SIZE", "2")
    assert _ranks.rank_and_world(None, None) == (1, 4)
    loader = stoker.Loader(even_shards, batch_size=4, image_size=16, threads=1,
                           samples_per_rank=8)
    info = loader._c.info()
    assert (info["rank"], info["world_size"]) == (1, 4)
    loader.close()


def test_default_threads_honour_the_cgroup_cpu_quota(tmp_path, monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_SIZE", raising=False)
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert _ranks.default_threads(str(tmp_path)) == cores  # no cgroup files: the mask
    (tmp_path / "cpu.max").write_text("100000 100000\n")  # a container of 1 CPU
    assert _ranks.usable_cores(str(tmp_path)) == 1
    assert _ranks.default_threads(str(tmp_path)) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert _ranks.default_threads(str(tmp_path)) == cores


def test_sizes_are_read_by_the_c_library():
    assert _stoker.parse_size("4G") == 4 << 30 and _stoker.parse_size("256KiB") == 256 << 10
    assert stoker.loader.options_doc._default_value(
        {"default": "2G", "type": "int", "bytes": True}) == 2 << 30
    with pytest.raises(stoker.OptionError, match="is not a size"):
        _stoker.parse_size("4 G")
