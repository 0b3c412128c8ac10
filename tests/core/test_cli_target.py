"""Every client command finds its server in ``$SGLANG_MM_GRPC_TARGET`` when ``--target``
is not given; ``preprocess`` and ``plan`` work in-process without either, or with
``--in-process`` whatever the variable says."""

from __future__ import annotations

import pytest

import imagegen
from servers import free_port
from sglang_mm_grpc.cli import main

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"


@pytest.fixture
def nobody(monkeypatch) -> str:
    """The variable naming a port where no server listens."""
    target = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("SGLANG_MM_GRPC_TARGET", target)
    return target


@pytest.mark.parametrize("command", ["preprocess", "plan"])
def test_the_variable_sends_the_work_to_its_server_and_in_process_keeps_it_here(command, nobody, tmp_path, capsys):
    image = tmp_path / "a.png"
    image.write_bytes(imagegen.png(28, 28, seed=1))
    assert main([command, "--model", QWEN2, "--timeout", "5", str(image)]) == 1
    err = capsys.readouterr().err
    assert "UNAVAILABLE" in err and nobody in err
    assert main([command, "--model", QWEN2, "--in-process", str(image)]) == 0


def test_call_goes_to_the_variables_server(nobody, capsys):
    assert main(["call", "ListModels", "--timeout", "5"]) != 0
    assert nobody in capsys.readouterr().err
