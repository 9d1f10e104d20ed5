# SPDX-License-Identifier: MIT
"""Hooks for test_cluster_hooks.py that behave differently on a Dask worker
whose environment says so (module-level: the workers and their hook
processes import them by name)."""
import os
import time


def biased(image, rng):
    """Adds $STOKER_TEST_HOOK_BIAS to every pixel: a hook whose bytes depend
    on its host, as a library built differently there would make them."""
    return image + int(os.environ.get("STOKER_TEST_HOOK_BIAS", "0"))


def where(image, rng):
    """Leaves a file named "PID-PARENT" of the process that ran it in
    $STOKER_TEST_WHERE_DIR, after sleeping $STOKER_TEST_HOOK_SLEEP seconds;
    returns the image."""
    if os.environ.get("STOKER_TEST_WHERE_DIR"):
        open(os.path.join(os.environ["STOKER_TEST_WHERE_DIR"],
                          f"{os.getpid()}-{os.getppid()}"), "a").close()
    time.sleep(float(os.environ.get("STOKER_TEST_HOOK_SLEEP", "0")))
    return image


def fail_where_told(image, rng):
    """where(), but raises ValueError on a host whose $STOKER_TEST_HOOK_FAIL
    is set."""
    if os.environ.get("STOKER_TEST_HOOK_FAIL"):
        raise ValueError("told to fail on this host")
    return where(image, rng)


def biased_batch(batch, rng):
    """biased() as a batch_map= hook: (images + $STOKER_TEST_HOOK_BIAS,
    labels)."""
    images, labels = batch
    return images + int(os.environ.get("STOKER_TEST_HOOK_BIAS", "0")), labels


def plus_table(image, rng, table):
    """image + table[0]: with functools.partial, a hook that holds a large
    array (table), pickled with it."""
    return image + int(table[0])
