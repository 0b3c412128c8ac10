"""Numba kernels: pure array in, array out. They know nothing of models or gRPC.

Installed as ``sglang_mm_grpc.kernels``. Every kernel is nopython, ``nogil=True`` and
``cache=True`` so CPU workers run them in parallel threads and a restart skips compilation.
"""
