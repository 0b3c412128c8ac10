"""``sglang-mm-grpc call METHOD [JSON|@FILE]``: any unary method of a running server, in
JSON, through server reflection (what ``grpcurl -d`` does, without installing grpcurl).

METHOD is ``Preprocess``, ``MultimodalPreprocessor/Preprocess``,
``sglang_mm.v1.MultimodalPreprocessor/Preprocess`` or another service's method, e.g.
``grpc.health.v1.Health/Check``. The request is JSON in protobuf's mapping (bytes as
base64), given inline, as ``@file``, or as ``@-`` for standard input; the response is
printed as JSON.
"""

from __future__ import annotations

import json
import sys

DEFAULT_SERVICE = "sglang_mm.v1.MultimodalPreprocessor"


def add_call_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "call", help="call any method of a running server with a JSON request (via reflection)",
        description=__doc__,
    )
    p.add_argument("method", metavar="METHOD", help="e.g. ListModels, Preprocess, grpc.health.v1.Health/Check")
    p.add_argument("request", nargs="?", default="{}", metavar="JSON|@FILE",
                   help="the request as JSON, @file or @- for stdin (default: {})")
    p.add_argument("--target", default="127.0.0.1:50061", help="HOST:PORT of the server (default %(default)s)")
    p.add_argument("--timeout", type=float, default=60.0, help="deadline in seconds (default %(default)s)")
    p.set_defaults(func=run_call)


def run_call(args) -> int:
    import grpc
    from google.protobuf import descriptor_pool, json_format, message_factory
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    try:
        text = _request_text(args.request)
        json.loads(text)
    except (OSError, ValueError) as e:
        print(f"error: the request is not JSON: {e}", file=sys.stderr)
        return 2
    with grpc.insecure_channel(args.target, options=[("grpc.max_receive_message_length", -1)]) as channel:
        pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        try:
            method = _find_method(pool, args.method)
        except grpc.RpcError as e:
            print(f"error: cannot reach {args.target} for reflection: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
        except KeyError as e:
            print(f"error: {e.args[0]}", file=sys.stderr)
            return 2
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        try:
            request = json_format.Parse(text, request_class())
        except json_format.ParseError as e:
            print(f"error: the request does not fit {method.input_type.full_name}: {e}", file=sys.stderr)
            return 2
        call = channel.unary_unary(f"/{method.containing_service.full_name}/{method.name}",
                                   request_serializer=request_class.SerializeToString,
                                   response_deserializer=response_class.FromString)
        try:
            response = call(request, timeout=args.timeout)
        except grpc.RpcError as e:
            print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    print(json_format.MessageToJson(response, preserving_proto_field_name=True))
    return 0


def _request_text(request: str) -> str:
    if request == "@-":
        return sys.stdin.read()
    if request.startswith("@"):
        with open(request[1:], encoding="utf-8") as f:
            return f.read()
    return request


def _find_method(pool, name: str):
    """The method descriptor for ``name``: ``Method``, ``Service/Method`` or ``pkg.Service/Method``."""
    service, _, method = name.rpartition("/") if "/" in name else (DEFAULT_SERVICE, "", name)
    if "." not in service:
        service = f"{DEFAULT_SERVICE.rpartition('.')[0]}.{service}"
    try:
        descriptor = pool.FindServiceByName(service)
    except KeyError:
        raise KeyError(f"the server offers no service {service!r}") from None
    found = descriptor.methods_by_name.get(method)
    if found is None:
        raise KeyError(f"{service} has no method {method!r}; it has {', '.join(descriptor.methods_by_name)}")
    if found.client_streaming or found.server_streaming:
        raise KeyError(f"{service}/{method} streams; call only calls unary methods")
    return found
