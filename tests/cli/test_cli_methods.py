"""``entflow methods``: the table lists every docs/design.md §6 method; ``entflow methods NAME`` shows
docstring, formula, paper, parameters with default / range / help, hooks and needed fields."""

from __future__ import annotations

from entflow.cli.main import main
from support.method_defaults import DESIGN_NAMES


def test_methods_lists_every_spec_method(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in DESIGN_NAMES:
        assert f" {name} " in out, name
    assert "lambda_min=0.8" in out and "paper 001 Eq. 7–9" in out


def test_methods_one_in_full(capsys):
    assert main(["methods", "clip_cov"]) == 0
    out = capsys.readouterr().out
    for text in ("Clip-Cov", "paper 003 Eq. 9–10", "ratio", "0.0002", "a number in [0, 1]", "token_weights",
                 "fraction of valid tokens to clip", "state (state_dict): generator"):  # fmt: skip
        assert text in out, text
    assert main(["methods", "kl_ref"]) == 0
    assert "needed by policy_loss: ref_logp" in capsys.readouterr().out
    assert main(["methods", "gtpo"]) == 0
    out = capsys.readouterr().out
    assert "compute_advantages: rewards, group_index" in out and "old_entropy" in out


def test_methods_unknown_name(capsys):
    assert main(["methods", "stear"]) == 2
    assert "unknown method 'stear'" in capsys.readouterr().err


def test_methods_name_shows_formulas_as_plain_text(capsys):
    """No reStructuredText marks (``literal``, :role:`x`, **strong**) reach the terminal."""
    from entflow.methods.base import iter_registered

    for cls in iter_registered():
        assert main(["methods", cls.name]) == 0
        out = capsys.readouterr().out
        assert "``" not in out and ":class:`" not in out and ":func:`" not in out and "**" not in out, cls.name
    assert main(["methods", "steer"]) == 0
    out = capsys.readouterr().out
    # the exp mapping's formula, as the docstring writes it between ``...``, on one line
    assert "λ_t = clamp(exp(ln λ_min · |Ω_t| / max(max |Ω|, floor)), λ_min, 1)" in out


def test_rst_to_text():
    from entflow.cli.methods import rst_to_text

    doc = (
        "See :class:`~entflow.core.ppo.LossSpec` and :func:`the loss <entflow.core.ppo.policy_loss>`, ``x + y``.\n"
        "This sentence\nis wrapped.\n\n"
        "Example::\n\n    kept   as written\n\n"
        "- **first** item\n  continued\n- second\n"
    )
    assert rst_to_text(doc).splitlines() == [
        "See LossSpec and the loss, x + y. This sentence is wrapped.",
        "",
        "Example:",
        "",
        "    kept   as written",
        "",
        "- first item continued",
        "- second",
    ]
