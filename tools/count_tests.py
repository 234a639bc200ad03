"""Counts passed / failed / skipped cases in a meson testlog.json.

TAP tests (the cmocka suites) count each case; other tests count once.
A TAP program that skips as a whole ("1..0 # SKIP why") counts as one skip.
Prints "passed failed skipped".
"""
import json
import sys

passed = failed = skipped = 0
with open(sys.argv[1]) as log:
    for line in log:
        test = json.loads(line)
        result = test.get("result", "")
        subtests = [s for s in test.get("stdout", "").splitlines()
                    if s.startswith("ok ") or s.startswith("not ok ")]
        # meson 1.0 writes no "protocol" key: a TAP test shows by its plan line.
        plan = [s for s in test.get("stdout", "").splitlines() if s.startswith("1..")]
        if plan and plan[0].startswith("1..0") and "# SKIP" in plan[0]:
            skipped += 1  # the whole program skipped (backend unavailable)
        elif plan and subtests:
            for s in subtests:
                if "# SKIP" in s or "# skip" in s:
                    skipped += 1
                elif s.startswith("ok "):
                    passed += 1
                else:
                    failed += 1
            if result in ("FAIL", "ERROR", "TIMEOUT") and not any(s.startswith("not ok") for s in subtests):
                failed += 1  # crashed after its last report
        elif result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
print(passed, failed, skipped)
