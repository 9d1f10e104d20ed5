"""Hooks for test_cluster_hooks.py that behave differently on a Dask worker
whose environment says so (module-level: the workers and their hook
processes import them by name)."""
import os


def biased(image, rng):
    """Adds $STOKER_TEST_HOOK_BIAS to every pixel: a hook whose bytes depend
    on its host, as a library built differently there would make them."""
    return image + int(os.environ.get("STOKER_TEST_HOOK_BIAS", "0"))
