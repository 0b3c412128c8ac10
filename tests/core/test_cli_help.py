"""Every command's ``--help`` reads as plain text: the docstrings it shows lose their
reStructuredText double backticks."""

from __future__ import annotations

import pytest

from sglang_mm_grpc.cli import main


@pytest.mark.parametrize("command", [[], ["serve"], ["preprocess"], ["plan"], ["models"], ["call"]],
                         ids=lambda c: c[0] if c else "top")
def test_help_is_plain_text(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage: sglang-mm-grpc" in out and "``" not in out
