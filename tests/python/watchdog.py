# SPDX-License-Identifier: MIT
"""pytest plugin: no test may hang the run.

Each test gets a timer. When it runs past STOKER_TEST_WATCHDOG_S (default
240 s) the plugin stops pytest's output capture first, so the report reaches
the terminal and CI's log, then names the test, dumps every thread's stack
and ends the run. A plain faulthandler.dump_traceback_later() would write
into pytest's capture file, which nobody reads once the process is gone: a
hung test used to end the run without a word.

The timer is a Python thread, so it needs the GIL; a thread that blocks in C
while holding it would stop it, and for that case faulthandler's own C
watchdog fires GRACE_S later (its dump may then be lost to the capture).
"""
import faulthandler
import os
import sys
import threading

import pytest

WATCHDOG_S = float(os.environ.get("STOKER_TEST_WATCHDOG_S", "240"))
GRACE_S = 30


@pytest.fixture(autouse=True)
def _watchdog(request):
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def expire():
        if capture is not None:
            capture.suspend_global_capture(in_=True)
        sys.stderr.write(f"\nwatchdog: {request.node.nodeid} ran past {WATCHDOG_S:g} s; "
                         "every thread's stack follows, then the run ends\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(WATCHDOG_S, expire)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(WATCHDOG_S + GRACE_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
    timer.cancel()
