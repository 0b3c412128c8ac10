#!/usr/bin/env python
"""Run the hostile-input table (tests/service/hostile.py) against fresh servers and print
each server's memory: RSS before the table, and peak RSS (VmHWM) while it ran.

    .venv/bin/python scripts/hostile_rss.py [-v]

Starts the same processes as tests/service/test_hostile_table.py (a strict and an open
server, and local HTTP servers on 127.0.0.1; nothing else is contacted), sends every
case, checks its status code and message, checks health and a good request after each,
and exits non-zero if any case did not answer as expected.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "service"))

import hostile  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case's status and message")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        h = hostile.Harness(Path(tmp))
        t0 = time.monotonic()
        h.start()
        try:
            names = hostile.servers_used(hostile.CASES)
            for name in names:
                h.good_request(name)  # the first request's one-time costs belong to the baseline
            baseline = {name: hostile.proc_status(h.pid(name)) for name in names}
            peak_reset = all([hostile.reset_peak(h.pid(name)) for name in names])
            print(f"servers SERVING in {time.monotonic() - t0:.1f} s; peak reset: {'yes' if peak_reset else 'no (VmHWM includes startup)'}")

            failures, t1 = [], time.monotonic()
            for case in hostile.CASES:
                h.http_reset()
                tc = time.monotonic()
                code, details = h.run(case)
                elapsed = time.monotonic() - tc
                try:
                    hostile.check_case(case, code, details, h.env, h.http_log())
                    assert h.health(case.server) == "SERVING", f"{case.id}: {case.server} is not SERVING"
                    assert len(h.good_request(case.server).images) == 1
                    ok = True
                except AssertionError as e:
                    failures.append(str(e))
                    ok = False
                if args.verbose or not ok:
                    print(f"{'ok ' if ok else 'BAD'} {case.server:6} {case.id:34} {code:18} {elapsed:5.2f}s  {details[:150]}")
            table_s = time.monotonic() - t1

            print(f"\n{len(hostile.CASES)} hostile cases in {table_s:.1f} s, {len(failures)} not as expected")
            for name in names:
                after = hostile.proc_status(h.pid(name))
                before = baseline[name]
                print(
                    f"{name:6}  RSS before {hostile.mb(before['VmRSS'])}, after {hostile.mb(after['VmRSS'])}; "
                    f"peak (VmHWM) during the table {hostile.mb(after['VmHWM'])}, "
                    f"+{hostile.mb(after['VmHWM'] - before['VmRSS'])} over the baseline"
                )
            for f in failures:
                print(f, file=sys.stderr)
            return 1 if failures else 0
        finally:
            h.stop()


if __name__ == "__main__":
    sys.exit(main())
