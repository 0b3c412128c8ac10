#!/usr/bin/env python
"""Three replicas on 127.0.0.1 behind the multi-target client, two-phase flows the whole
time, while one replica drains (SIGTERM, ``--drain-delay``) and is started again on its
port. Prints how many flows ran, the share that were OK (the promise: all of them), which
replicas served before and after the restart, and the timeline.

    .venv/bin/python scripts/replicas_drill.py [--replicas 3] [--threads 4] [--drain-delay 2] [--settle 5]

The same drill, shorter, is a test: tests/service/test_replicas.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from replica_drill import drill  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--drain-delay", type=float, default=2.0)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds of flows before the drain and after the restart")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        r = drill(Path(tmp), replicas=args.replicas, threads=args.threads, drain_delay=args.drain_delay,
                  settle_s=args.settle)
    print(f"{r.flows} two-phase flows, {r.ok_fraction:.1%} OK {dict(r.outcomes)}")
    print(f"drained and restarted: {r.drained}; exit code {r.timeline['exit_code']}")
    print(f"flows by owner before the restart: {dict(r.served_before)}")
    print(f"flows by owner after it:           {dict(r.served_after)}")
    print("timeline (s): " + ", ".join(f"{k} {v:.2f}" for k, v in r.timeline.items() if k != "exit_code"))
    for code, details in r.errors[:5]:
        print(f"  {code}: {details}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "flows": r.flows, "outcomes": dict(r.outcomes), "ok_fraction": r.ok_fraction, "drained": r.drained,
            "served_before": dict(r.served_before), "served_after": dict(r.served_after), "timeline": r.timeline,
        }, indent=1) + "\n")
    return 0 if r.outcomes.get("OK", 0) == r.flows else 1


if __name__ == "__main__":
    sys.exit(main())
