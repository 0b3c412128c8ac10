#!/usr/bin/env python3
"""The HF side of ``scripts/bench.py``'s in-process section, in a process of its own.

    python scripts/bench_hf.py      # started by bench.py; JSON lines in on stdin, out on stdout

It never imports ``sglang_mm_grpc`` (nor anything of this checkout): HF's processors run
here with the process as HF users have it (Pillow, malloc and numpy left at their
defaults, torch at one thread), while bench.py times ours in its own process, one call
here and one call there in turn, so drift on the machine hits both. Every request is
answered with one JSON line; timings are taken here, around the call alone.

Requests (``op`` and its fields):
  load    kind, config: build HF's PIL (``<kind>Pil``) and torchvision (``<kind>``)
          image processors from a preprocessor_config dict; answers which exist and,
          for each that does not, why (the import that failed here and what to install,
          a class this transformers lacks); without numpy and Pillow every request is
          refused with that reason
  image   path, shape: the encoded image to work on (read once) and the float32 shape
          of the output tensor the floor writes
  time    what = hf_pil | hf_tv | floor: one timed call, as [wall ms, this thread's cpu
          ms]. hf_*: the processor on ``exif_transpose(Image.open(bytes))`` as an HF
          user calls it (decode included; ms); floor: Pillow's decode to RGB, then one
          write of a fresh output-sized float32 tensor, timed apart (decode, write)
  digest  what = hf_pil | hf_tv: sha256 and shape of the processor's pixel_values as
          float32 (bfloat16 widened), for bench.py to compare with ours
  quit
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import platform
import sys
import time


#: What to install for each column when its imports fail in this interpreter.
INSTALL = {"transformers": "pip install transformers", "torch": "pip install torch torchvision"}


def _missing(what: str, error: Exception) -> str:
    """Why a column is empty: the import that failed, in which interpreter, and the fix."""
    return (f"{what} is not importable by {sys.executable} ({type(error).__name__}: {error}); "
            f"install it there ({INSTALL[what]}) or pass --hf-python an interpreter that has it")


def _processors(kind: str, config: dict) -> dict:
    """HF's PIL (``<kind>Pil``) and torchvision (``<kind>``) processors built from
    ``config``, the versions, and per column that could not be built the reason (a
    failed import, a class this transformers lacks, a constructor's error)."""
    versions = {"python": platform.python_version()}
    try:
        import PIL

        versions["pillow"] = PIL.__version__
    except ImportError:
        pass
    try:
        import transformers
    except ImportError as e:
        why = _missing("transformers", e)
        return {"processors": {}, "versions": versions, "errors": {"hf_pil": why, "hf_tv": why}}
    logging.getLogger("transformers").setLevel(logging.ERROR)
    versions["transformers"] = transformers.__version__
    names = {"hf_pil": kind + "Pil", "hf_tv": kind}
    found = {key: getattr(transformers, name, None) for key, name in names.items()}
    errors = {key: f"transformers {transformers.__version__} has no {names[key]}"
              for key, cls in found.items() if cls is None}
    try:
        import torch
        import torchvision

        torch.set_num_threads(1)  # one thread, like ours
        versions["torch"], versions["torchvision"] = torch.__version__, torchvision.__version__
        versions["torch_threads"] = torch.get_num_threads()
    except ImportError as e:
        found["hf_tv"] = None
        errors["hf_tv"] = _missing("torch", e)
    built = {}
    for key, cls in found.items():
        if cls is None:
            continue
        try:
            built[key] = cls(**config)
        except Exception as e:  # reported, not fatal: that column stays empty
            errors[key] = f"{names[key]}(**config) failed: {type(e).__name__}: {e}"
    return {"processors": built, "versions": versions, "errors": errors}


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def _ms(t0, t1) -> list[float]:
    """[wall, cpu] milliseconds between two ``_clock`` readings (cpu: this thread's)."""
    return [(t1[0] - t0[0]) * 1e3, (t1[1] - t0[1]) * 1e3]


def main() -> int:
    try:
        import numpy as np
        from PIL import Image, ImageOps
    except ImportError as e:  # nothing can be timed here: answer every request with why
        return _refuse_all(f"numpy and Pillow are not importable by {sys.executable} "
                           f"({type(e).__name__}: {e}); install them there (pip install numpy pillow) or pass "
                           "--hf-python an interpreter that has them")

    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # whatever a library prints cannot corrupt the replies
    procs: dict = {}
    raw, shape = b"", ()

    def call(key: str):
        tensors = "pt" if key == "hf_tv" else "np"  # torch tensors: torchvision's native output
        return procs[key](ImageOps.exif_transpose(Image.open(io.BytesIO(raw))), return_tensors=tensors)

    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        reply: dict = {"ok": True}
        if op == "load":
            loaded = _processors(req["kind"], req["config"])
            procs = loaded["processors"]
            reply.update(available=sorted(procs), versions=loaded["versions"], errors=loaded["errors"],
                         pid=os.getpid(), imported_package="sglang_mm_grpc" in sys.modules)
        elif op == "image":
            with open(req["path"], "rb") as f:
                raw = f.read()
            shape = tuple(req["shape"])
        elif op == "time":
            what = req["what"]
            if what == "floor":
                t0 = _clock()
                im = Image.open(io.BytesIO(raw))
                im.load()
                if im.mode != "RGB":
                    im = im.convert("RGB")
                t1 = _clock()
                np.empty(shape, np.float32).fill(1.0)
                t2 = _clock()
                reply.update(decode=_ms(t0, t1), write=_ms(t1, t2))
            else:
                t0 = _clock()
                call(what)
                reply["ms"] = _ms(t0, _clock())
        elif op == "digest":
            pv = call(req["what"])["pixel_values"]
            if hasattr(pv, "detach"):
                pv = pv.detach().float().numpy()
            pv = np.ascontiguousarray(np.asarray(pv, dtype=np.float32))
            reply.update(sha256=hashlib.sha256(pv.data).hexdigest(), shape=list(pv.shape))
        elif op == "quit":
            reply["imported_package"] = "sglang_mm_grpc" in sys.modules
            out.write(json.dumps(reply) + "\n")
            return 0
        else:
            reply = {"ok": False, "error": f"unknown op {op!r}"}
        out.write(json.dumps(reply) + "\n")
    return 0


def _refuse_all(why: str) -> int:
    """Without numpy and Pillow: every request gets ``ok: false`` and the reason."""
    for line in sys.stdin:
        op = json.loads(line).get("op")
        print(json.dumps({"ok": op == "quit", "error": why, "imported_package": "sglang_mm_grpc" in sys.modules}),
              flush=True)
        if op == "quit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
