#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Print the ten slowest tests, then one closing line for CI: "N passed,
N failed" over every suite.

Reads meson's testlog.json files (one test per C executable or fuzz
replay) and pytest's JUnit XML (one per test function). A suite whose log
is missing counts as one failure, so a crashed build cannot look green.
"""
import json
import os
import sys
import xml.etree.ElementTree as ET

SLOWEST = 10


def count_meson(path, times):
    """Passed and failed of a testlog.json; appends (seconds, name) to times."""
    passed = failed = 0
    tree = os.path.normpath(path).split(os.sep)[0]
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            test = json.loads(line)
            times.append((float(test.get("duration", 0)), f"{tree}: {test['name']}"))
            if test["result"] in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif test["result"] != "SKIP":
                failed += 1
    return passed, failed


def count_junit(path, times):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    passed = failed = 0
    tree = os.path.normpath(path).split(os.sep)[0]
    for s in suites:
        total = int(s.get("tests", 0))
        bad = int(s.get("failures", 0)) + int(s.get("errors", 0))
        skipped = int(s.get("skipped", 0))
        failed += bad
        passed += total - bad - skipped
        for case in s.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            times.append((float(case.get("time", 0)), f"{tree}: {name}"))
    return passed, failed


def main(paths):
    passed = failed = 0
    times = []
    for path in paths:
        try:
            p, f = (count_junit if path.endswith(".xml") else count_meson)(path, times)
        except (OSError, ValueError, KeyError, ET.ParseError) as e:
            print(f"summarize: cannot read {path}: {e}", file=sys.stderr)
            p, f = 0, 1
        passed += p
        failed += f
    print(f"the {SLOWEST} slowest tests:")
    for seconds, name in sorted(times, reverse=True)[:SLOWEST]:
        print(f"{seconds:8.1f} s  {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
