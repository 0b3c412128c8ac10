"""The CLI's local preprocess and plan fail as the server's do: exit 1, the status name,
and an item named by the file given for it (not only "image 0"); a file that cannot be
read is named, without a raw ``[Errno 2]``."""

from __future__ import annotations

import pytest

import imagegen
from sglang_mm_grpc.cli import main

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"


@pytest.mark.parametrize("command", ["preprocess", "plan"])
def test_a_missing_file_is_named(command, tmp_path, capsys):
    good = tmp_path / "good.png"
    good.write_bytes(imagegen.png(28, 28, seed=1))
    missing = tmp_path / "nosuch.jpg"
    assert main([command, "--model", QWEN2, str(good), str(missing)]) == 1
    err = capsys.readouterr().err
    assert f"error: image 1 ({missing}): cannot read it: No such file or directory" in err and "Errno" not in err


@pytest.mark.parametrize("command", ["preprocess", "plan"])
def test_a_bad_image_is_named_by_its_file(command, tmp_path, capsys):
    good, bad = tmp_path / "good.png", tmp_path / "bad.jpg"
    good.write_bytes(imagegen.png(28, 28, seed=1))
    bad.write_bytes(b"not an image")
    assert main([command, "--model", QWEN2, str(good), str(bad)]) == 1
    assert f"error: INVALID_ARGUMENT: image 1 ({bad}): " in capsys.readouterr().err


def test_an_unknown_model_exits_1_as_through_a_server(tmp_path, capsys):
    image = tmp_path / "a.png"
    image.write_bytes(imagegen.png(28, 28, seed=1))
    assert main(["plan", "--model", "no/such-model", str(image)]) == 1
    assert "error: NOT_FOUND: unknown model 'no/such-model'" in capsys.readouterr().err
