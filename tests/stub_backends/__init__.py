"""Stand-ins for the three inference backends' gRPC servers, for the service tests.

Each is a real gRPC server in its own process (``python -m stub_backends.<name>_stub
--port N`` with ``tests/`` on the path, or ``python tests/stub_backends/<name>_stub.py
--port N``). It decodes ``Generate`` the way that backend's servicer does, rejects with
INVALID_ARGUMENT what that servicer would reject, and answers one GenerateComplete
whose trailing metadata ``x-stub-decoded`` holds a JSON report of what it understood.
"""
