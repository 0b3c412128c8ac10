"""A cold first start's parallel compile: helper processes warm every model beside this
one, each model is reported ready once, and progress lines come while it runs."""

from __future__ import annotations

import logging

from sglang_mm_grpc.server import precompile

SPECS = ["llava-hf/llava-1.5-7b-hf", "thinkingmachines/Inkling"]


def test_every_model_warmed_by_parallel_processes_with_progress(caplog, monkeypatch):
    monkeypatch.setattr(precompile, "PROGRESS_EVERY_S", 0.2)
    with caplog.at_level(logging.INFO, logger="sglang_mm_grpc.server"):
        precompile.compile_kernels(SPECS, processes=2)
    text = caplog.text
    for spec in SPECS:
        assert text.count(f"kernels of {spec} ready after") == 1, text
    assert "kernels compiled in" in text and "by 2 process(es)" in text
    assert "compiling kernels: " in text and "compiled kernel(s) in the cache; 2 process(es) on: " in text
    assert "exited with" not in text


def test_each_process_starts_its_share_of_the_way_along():
    specs = list("abcdef")
    assert precompile.rotated(specs, 0, 2) == specs
    assert precompile.rotated(specs, 1, 2) == list("defabc")
    assert sorted(precompile.rotated(specs, 2, 3)) == specs
