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


def test_exit_codes_follow_the_readme_table(tmp_path, capsys):
    """README "Exit codes": 0 done, 1 the work failed, 2 the command cannot run as given."""
    image = tmp_path / "a.png"
    image.write_bytes(imagegen.png(28, 28, seed=1))
    assert main(["plan", "--model", QWEN2, str(image)]) == 0
    assert main(["plan", "--model", QWEN2, str(tmp_path / "nosuch.png")]) == 1
    mistakes = [
        ["preprocess", "--model", QWEN2, "--backend", "vllm", str(image)],  # a payload needs a server
        ["preprocess", "--model", QWEN2, "--media-ids", str(image)],
        ["plan", "--model", QWEN2],  # nothing to plan
        ["plan", "--model", QWEN2, "--input-ids", "1,x", str(image)],
        ["call", "ListModels", "{not json", "--target", "127.0.0.1:1"],
    ]
    for argv in mistakes:
        capsys.readouterr()
        assert main(argv) == 2, argv
        assert capsys.readouterr().err.startswith("error: "), argv
    with pytest.raises(SystemExit) as e:  # argparse's own
        main(["plan", "--no-such-option", str(image)])
    assert e.value.code == 2
