# SPDX-License-Identifier: MIT
"""The environment of hook processes: the fingerprint, what it holds and the
message naming a difference (a Dask worker with another one is refused), and
the malloc settings they start with."""
import torch

from stoker.hooks import env as _hook_env
from stoker.hooks.processes import hook_process_env


def test_hook_processes_get_stokers_malloc_settings_over_a_dask_nanny(monkeypatch):
    """A Dask nanny sets MALLOC_TRIM_THRESHOLD_=65536 for its worker; hook
    processes started there must still get the settings that keep torch's
    large buffers mapped (issue 39: 6.5x the CPU per image without them)."""
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4096")
    env = hook_process_env()
    assert env["MALLOC_TRIM_THRESHOLD_"] == str(256 << 20)
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(64 << 20)


def test_fingerprint_names_versions_cpu_capability_and_the_hook():
    mine = _hook_env.fingerprint("abc")
    assert mine["torch"] == torch.__version__ and mine["hooks"] == "abc"
    assert mine["cpu_capability"] not in ("", "unknown")  # torch reports it
    assert _hook_env.compare(mine, _hook_env.fingerprint("abc")) == ""


def test_a_difference_is_named_with_both_values():
    mine = _hook_env.fingerprint("abc")
    theirs = dict(mine, torch="2.9.0", hooks="def", cpu_capability="AVX512")
    message = _hook_env.compare(mine, theirs)
    assert f"torch {torch.__version__} on the trainer, 2.9.0 on the worker" in message
    assert "hooks abc on the trainer, def on the worker" in message
    assert "cpu_capability" in message and "AVX512" in message
    assert "numpy" not in message
    assert "cv2 absent on the trainer" in _hook_env.compare(dict(mine, cv2=None),
                                                              dict(mine, cv2="4.6.0"))
