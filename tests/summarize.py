#!/usr/bin/python3
"""Print one closing line for CI: "N passed, N failed" over every suite.

Reads meson's testlog.json files (one test per C executable or fuzz
replay) and pytest's JUnit XML (one per test function). A suite whose log
is missing counts as one failure, so a crashed build cannot look green.
"""
import json
import sys
import xml.etree.ElementTree as ET


def count_meson(path):
    passed = failed = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            result = json.loads(line)["result"]
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result != "SKIP":
                failed += 1
    return passed, failed


def count_junit(path):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    passed = failed = 0
    for s in suites:
        total = int(s.get("tests", 0))
        bad = int(s.get("failures", 0)) + int(s.get("errors", 0))
        skipped = int(s.get("skipped", 0))
        failed += bad
        passed += total - bad - skipped
    return passed, failed


def main(paths):
    passed = failed = 0
    for path in paths:
        try:
            p, f = count_junit(path) if path.endswith(".xml") else count_meson(path)
        except (OSError, ValueError, ET.ParseError) as e:
            print(f"summarize: cannot read {path}: {e}", file=sys.stderr)
            p, f = 0, 1
        passed += p
        failed += f
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
