#!/usr/bin/env python3
"""Benchmark entry point; same as `sglang-mm-grpc bench` (see sglang_mm_grpc/bench.py)."""

import sys

from sglang_mm_grpc.bench import main

if __name__ == "__main__":
    sys.exit(main())
