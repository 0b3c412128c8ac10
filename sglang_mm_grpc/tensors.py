"""numpy <-> TensorData: little-endian, C-order element bytes, shape, dtype string.

Works with every TensorData message (ours and the three backends'): they share the
field names ``data``, ``shape`` and ``dtype``, which is all this module touches.
"""

from __future__ import annotations

import numpy as np

# dtype string on the wire -> little-endian numpy dtype.
WIRE_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "uint32": np.dtype("<u4"),
    "uint8": np.dtype("u1"),
}
_NAMES = {dt.newbyteorder("="): name for name, dt in WIRE_DTYPES.items()}


def wire_dtype_name(dtype) -> str:
    """The wire name of a numpy dtype; ValueError for one the wire has no name for."""
    dt = np.dtype(dtype)
    name = _NAMES.get(dt.newbyteorder("="))
    if name is None:
        raise ValueError(f"dtype {dt} has no TensorData name (known: {', '.join(WIRE_DTYPES)})")
    return name


def fill(msg, array: np.ndarray, dtype=None, *, data: bool = True):
    """Write ``array`` (cast to ``dtype`` if given) into the TensorData ``msg``; returns it.
    ``data=False`` sets only shape and dtype (the bytes are appended when serializing)."""
    arr = np.asarray(array)
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    name = wire_dtype_name(arr.dtype)
    if data:
        msg.data = np.asarray(arr, dtype=WIRE_DTYPES[name], order="C").tobytes()
    del msg.shape[:]
    msg.shape.extend(int(d) for d in arr.shape)
    msg.dtype = name
    return msg


def to_array(msg) -> np.ndarray:
    """The array a TensorData holds (read-only view of its bytes, native byte order not forced)."""
    dt = WIRE_DTYPES.get(msg.dtype)
    if dt is None:
        raise ValueError(f"unknown TensorData dtype {msg.dtype!r} (known: {', '.join(WIRE_DTYPES)})")
    shape = tuple(int(d) for d in msg.shape)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(msg.data) != count * dt.itemsize:
        raise ValueError(
            f"TensorData holds {len(msg.data)} bytes but shape {list(shape)} of {msg.dtype} needs "
            f"{count * dt.itemsize}"
        )
    return np.frombuffer(msg.data, dtype=dt).reshape(shape)
