"""``sglang-mm-grpc call METHOD [JSON|@FILE]``: any unary method of a running server, in
JSON, through server reflection (what ``grpcurl -d`` does, without installing grpcurl).

METHOD is ``Preprocess``, ``MultimodalPreprocessor/Preprocess``,
``sglang_mm.v1.MultimodalPreprocessor/Preprocess`` or another service's method, e.g.
``grpc.health.v1.Health/Check``. The request is JSON in protobuf's mapping (bytes as
base64), given inline, as ``@file``, or as ``@-`` for standard input; the response is
printed as JSON, a bytes value over 64 bytes (a tensor's data) as its size and blake3
hash (``--full``: whole; ``--out FILE`` writes the whole response to FILE). TLS and a
bearer token as for ``preprocess --target`` (``--tls-ca``, ``--tls-cert``/``--tls-key``,
``--auth-token-file``/``--auth-token-env``), for the reflection calls too.
"""

from __future__ import annotations

import json
import re
import sys

from .remote import add_client_security_arguments, add_target_arguments, client_security, plain

DEFAULT_SERVICE = "sglang_mm.v1.MultimodalPreprocessor"
#: Bytes values longer than this are printed as their size and hash (``--full``: whole).
SHOWN_BYTES = 64
#: How deeply a request's JSON may nest (objects and arrays): twice protobuf's own limit
#: of 100 nested messages (json_format), so every message it parses fits, a repeated
#: field at each level included; deeper text is refused before json.loads recurses.
MAX_JSON_DEPTH = 200
#: A JSON string (skipped: brackets in it do not nest) or one bracket.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def add_call_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "call", help="call any method of a running server with a JSON request (via reflection)",
        description=plain(__doc__),
    )
    p.add_argument("method", metavar="METHOD", help="e.g. ListModels, Preprocess, grpc.health.v1.Health/Check")
    p.add_argument("request", nargs="?", default="{}", metavar="JSON|@FILE",
                   help="the request as JSON, @file or @- for stdin (default: {})")
    add_target_arguments(p, timeout=60.0, local=False)
    p.add_argument("--full", action="store_true",
                   help=f"print bytes fields whole (base64); by default one over {SHOWN_BYTES} bytes (a tensor's data) "
                   "is shown as its size and blake3 hash")
    p.add_argument("--out", metavar="FILE", help="also write the whole response (bytes in base64) to FILE as JSON")
    add_client_security_arguments(p)
    p.set_defaults(func=run_call)


def run_call(args) -> int:
    import grpc
    from google.protobuf import descriptor_pool, json_format, message_factory
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    try:
        text = _request_text(args.request)
        _check_depth(text)
        json.loads(text)
    except _TooDeep as e:
        print(f"error: the request JSON {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"error: the request is not JSON: {e}", file=sys.stderr)
        return 2
    except RecursionError:  # not expected past _check_depth; never a traceback
        print(f"error: the request JSON is nested too deeply (the limit is {MAX_JSON_DEPTH} levels)", file=sys.stderr)
        return 2
    try:
        security = client_security(args)
        channel = _channel(args.target, security)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with channel:
        pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        try:
            method = _find_method(pool, args.method)
        except grpc.RpcError as e:
            print(f"error: cannot ask {args.target} for its methods (reflection): {_status(e, security)}",
                  file=sys.stderr)
            return 1
        except KeyError as e:
            print(f"error: {e.args[0]}", file=sys.stderr)
            return 2
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        try:
            request = json_format.Parse(text, request_class())
        except (json_format.ParseError, RecursionError) as e:
            print(f"error: the request does not fit {method.input_type.full_name}: {e}{_enum_values(pool, str(e))}",
                  file=sys.stderr)
            return 2
        call = channel.unary_unary(f"/{method.containing_service.full_name}/{method.name}",
                                   request_serializer=request_class.SerializeToString,
                                   response_deserializer=response_class.FromString)
        try:
            response = call(request, timeout=args.timeout)
        except grpc.RpcError as e:
            print(f"error: {_status(e, security)}", file=sys.stderr)
            return 1
    return _print_response(response, args)


def _print_response(response, args) -> int:
    """Print ``response`` (abbreviated unless ``--full``), and write it whole to ``--out``."""
    from google.protobuf import json_format

    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(json_format.MessageToJson(response, preserving_proto_field_name=True) + "\n")
        except OSError as e:
            print(f"error: cannot write {args.out}: {e.strerror}", file=sys.stderr)
            return 2
    shown = json_format.MessageToDict(response, preserving_proto_field_name=True)
    if not args.full:
        abbreviate(response, shown)
    print(json.dumps(shown, indent=2))
    return 0


def abbreviate(message, shown: dict) -> None:
    """Replace in ``shown`` (``message`` as ``MessageToDict`` gives it) each bytes value over
    ``SHOWN_BYTES`` by ``<N bytes, blake3 H>``: a tensor's shape and dtype stay beside it,
    its megabytes of base64 do not reach the terminal."""
    from google.protobuf.descriptor import FieldDescriptor as F

    from ..core.hashing import content_hash

    def short(value: bytes, as_json):
        if len(value) <= SHOWN_BYTES:
            return as_json
        return f"<{len(value)} bytes, blake3 {content_hash(value)[:16]}>"

    for field, value in message.ListFields():
        if field.is_extension or field.name not in shown:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            inner = field.message_type.fields_by_name["value"]
            for key in value:
                k = str(key).lower() if isinstance(key, bool) else str(key)
                if inner.type == F.TYPE_BYTES:
                    shown[field.name][k] = short(value[key], shown[field.name][k])
                elif inner.type == F.TYPE_MESSAGE and not _well_known(inner.message_type):
                    abbreviate(value[key], shown[field.name][k])
        elif field.type == F.TYPE_BYTES:
            if field.is_repeated:
                shown[field.name] = [short(v, j) for v, j in zip(value, shown[field.name])]
            else:
                shown[field.name] = short(value, shown[field.name])
        elif field.type == F.TYPE_MESSAGE and not _well_known(field.message_type):
            if field.is_repeated:
                for v, j in zip(value, shown[field.name]):
                    abbreviate(v, j)
            else:
                abbreviate(value, shown[field.name])


def _well_known(descriptor) -> bool:
    """Types (Struct, Any, Timestamp, ...) whose JSON is not a field-by-field object."""
    return descriptor.full_name.startswith("google.protobuf.")


class _TooDeep(ValueError):
    pass


def _check_depth(text: str) -> None:
    """_TooDeep when objects and arrays nest deeper than MAX_JSON_DEPTH (counted without
    recursion; strings skipped). Malformed text is left to json.loads to name."""
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise _TooDeep(f"is nested too deeply: more than {MAX_JSON_DEPTH} levels of objects and arrays "
                               f"at character {m.start()} (the limit is {MAX_JSON_DEPTH})")
        elif c in "]}":
            depth -= 1


def _channel(target: str, security: dict):
    """The channel to ``target`` with ``client_security``'s TLS and token (the token on
    every kind of call: reflection streams both ways)."""
    import grpc

    from ..server.gate import read_pem

    options = [("grpc.max_receive_message_length", -1)]
    if security["tls_server_name"]:
        options.append(("grpc.ssl_target_name_override", security["tls_server_name"]))
    if security["tls"]:
        cert, key = security["tls_cert"], security["tls_key"]
        if bool(cert) != bool(key):
            raise ValueError("--tls-cert and --tls-key go together")
        credentials = grpc.ssl_channel_credentials(
            root_certificates=read_pem(security["tls_ca"], "--tls-ca") if security["tls_ca"] else None,
            private_key=read_pem(key, "--tls-key") if key else None,
            certificate_chain=read_pem(cert, "--tls-cert") if cert else None,
        )
        channel = grpc.secure_channel(target, credentials, options)
    else:
        channel = grpc.insecure_channel(target, options)
    if security["token"]:
        channel = grpc.intercept_channel(channel, _bearer(security["token"]))
    return channel


def _status(e, security: dict) -> str:
    """``CODE: details`` of a failed call, with what to do about a missing token."""
    text = f"{e.code().name}: {e.details()}"
    if e.code().name == "UNAUTHENTICATED":
        text += (" (the token given was refused)" if security["token"] else
                 " (give the token with --auth-token-file FILE or --auth-token-env VAR)")
    return text


def _bearer(token: str):
    """An interceptor adding ``authorization: Bearer <token>`` to every call, whatever its
    kind (grpc imported here, as everywhere in this module, only when a call is made)."""
    import grpc

    md = ("authorization", f"Bearer {token}")

    class Details(grpc.ClientCallDetails):
        def __init__(self, base):
            self.method, self.timeout, self.credentials = base.method, base.timeout, base.credentials
            self.wait_for_ready, self.compression = base.wait_for_ready, base.compression
            self.metadata = [*(base.metadata or ()), md]

    class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                 grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
        def intercept_unary_unary(self, continuation, details, request):
            return continuation(Details(details), request)

        intercept_unary_stream = intercept_stream_unary = intercept_stream_stream = intercept_unary_unary

    return Bearer()


_BAD_ENUM = re.compile(r"Invalid enum value \S+ for enum type ([\w.]+)")


def _enum_values(pool, error: str) -> str:
    """For an enum value the request misspells: the values the enum has."""
    m = _BAD_ENUM.search(error)
    if not m:
        return ""
    try:
        enum = pool.FindEnumTypeByName(m.group(1))
    except KeyError:
        return ""
    return f" ({m.group(1)} is one of: {', '.join(v.name for v in enum.values)})"


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
