# SPDX-License-Identifier: MIT
"""The watchdog must show which test hung and where, on the terminal."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_a_hung_test_is_named_with_its_stack(tmp_path):
    (tmp_path / "conftest.py").write_text("from watchdog import _watchdog  # noqa: F401\n")
    (tmp_path / "test_hang.py").write_text(textwrap.dedent("""
        import time

        def test_sleeps_forever():
            print("captured output")
            time.sleep(600)
        """))
    env = dict(os.environ, PYTHONPATH=str(HERE), STOKER_TEST_WATCHDOG_S="2")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "watchdog: test_hang.py::test_sleeps_forever ran past 2 s" in run.stderr
    assert "in test_sleeps_forever" in run.stderr
