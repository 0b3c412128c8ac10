"""numpy <-> TensorData: little-endian, C-order element bytes, shape, dtype string.

Works with every TensorData message: this service's and SGLang's carry the bytes in
``data``; vLLM's and TokenSpeed's in the ``payload`` oneof (``inline``, or ``shm`` for a
/dev/shm segment, which ``to_array`` reads through a caller-given reader).
"""

from __future__ import annotations

import numpy as np

# dtype string on the wire -> little-endian numpy dtype. bfloat16 has no numpy type: its
# bit patterns are read as uint16 (``bf16_as_float32`` widens them exactly).
WIRE_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype("<u2"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "uint32": np.dtype("<u4"),
    "uint8": np.dtype("u1"),
}
_NAMES = {dt.newbyteorder("="): name for name, dt in WIRE_DTYPES.items() if name != "bfloat16"}


def wire_dtype_name(dtype) -> str:
    """The wire name of a numpy dtype; ValueError for one the wire has no name for."""
    dt = np.dtype(dtype)
    name = _NAMES.get(dt.newbyteorder("="))
    if name is None:
        raise ValueError(f"dtype {dt} has no TensorData name (known: {', '.join(_NAMES.values())})")
    return name


def _bytes_field(msg) -> str:
    return "inline" if "inline" in msg.DESCRIPTOR.fields_by_name else "data"


def fill(msg, array: np.ndarray, dtype=None, *, data: bool = True):
    """Write ``array`` (cast to ``dtype`` if given) into the TensorData ``msg``; returns it.
    An ``inline`` payload is always set, empty tensors included (vLLM refuses a
    TensorData without one). ``data=False`` sets only shape and dtype."""
    arr = np.asarray(array)
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    name = wire_dtype_name(arr.dtype)
    if data:
        setattr(msg, _bytes_field(msg), np.asarray(arr, dtype=WIRE_DTYPES[name], order="C").tobytes())
    del msg.shape[:]
    msg.shape.extend(int(d) for d in arr.shape)
    msg.dtype = name
    return msg


def payload_bytes(msg, read_shm=None) -> bytes:
    """A TensorData's element bytes: ``data``, ``inline``, or through ``read_shm(handle)``."""
    if _bytes_field(msg) == "data":
        return msg.data
    which = msg.WhichOneof("payload")
    if which == "inline":
        return msg.inline
    if which == "shm":
        if read_shm is None:
            raise ValueError(f"TensorData is in shared memory ({msg.shm.name}); pass a reader")
        return read_shm(msg.shm)
    raise ValueError("TensorData payload is not set" if which is None else f"TensorData.{which} is not readable here")


def to_array(msg, read_shm=None) -> np.ndarray:
    """The array a TensorData holds (read-only view of its bytes; bfloat16 as uint16 bits)."""
    dt = WIRE_DTYPES.get(msg.dtype)
    if dt is None:
        raise ValueError(f"unknown TensorData dtype {msg.dtype!r} (known: {', '.join(WIRE_DTYPES)})")
    raw = payload_bytes(msg, read_shm)
    shape = tuple(int(d) for d in msg.shape)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(raw) != count * dt.itemsize:
        raise ValueError(
            f"TensorData holds {len(raw)} bytes but shape {list(shape)} of {msg.dtype} needs {count * dt.itemsize}"
        )
    return np.frombuffer(raw, dtype=dt).reshape(shape)


def bf16_as_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
