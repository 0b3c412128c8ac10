"""``python -m sglang_mm_grpc.cli``: the ``sglang-mm-grpc`` command."""

import sys

from .commands import main

sys.exit(main())
