"""``EntflowGRPOConfig`` warns when TRL's default ``bf16=True`` would autocast a CPU run to a
bfloat16 that the CPU emulates (``integrations/trl/config.py``: ``warn_if_cpu_emulates_bf16``)."""

from __future__ import annotations

import platform
import warnings
from pathlib import Path

import pytest

pytest.importorskip("trl")

import torch

from entflow.errors import EmulatedBF16Warning
from entflow.integrations.trl import EntflowGRPOConfig
from entflow.integrations.trl import config as trl_config
from support.trl_capture import trl_args


def emulated_bf16_warnings(**kw) -> tuple[list[warnings.WarningMessage], EntflowGRPOConfig]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        args = EntflowGRPOConfig(**kw)
    return [w for w in seen if issubclass(w.category, EmulatedBF16Warning)], args


@pytest.mark.parametrize(
    ("native", "bf16", "warns"),
    [(False, True, True), (True, True, False), (None, True, False), (False, False, False)],
    ids=["emulated", "native", "unknown", "float32"],
)
def test_warns_only_for_bf16_on_a_cpu_that_emulates_it(tmp_path, monkeypatch, native, bf16, warns):
    monkeypatch.setattr(trl_config, "cpu_has_native_bf16", lambda: native)
    seen, args = emulated_bf16_warnings(**trl_args(tmp_path, bf16=bf16))
    assert len(seen) == int(warns)
    assert args.bf16 is bf16  # a warning, never a change of the user's choice
    if warns:
        message = str(seen[0].message)
        assert "bf16=False" in message and torch.backends.cpu.get_cpu_capability() in message
        assert seen[0].filename == __file__  # the line that built the config, not entflow's code


def x86_flags() -> set[str] | None:
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    line = next((row for row in text.splitlines() if row.startswith("flags")), None)
    return set(line.split(":", 1)[1].split()) if line else None


def test_native_bf16_agrees_with_the_cpu_flags():
    """x86 computes bfloat16 natively only with AVX512-BF16 or AMX-BF16. AVX-512 alone is not enough
    (oneDNN accepts it, converting through float32): on the project's AVX-512 Xeon without
    AVX512-BF16, autocast took several times float32's time (docs/benchmarks.md). Read independently
    from /proc/cpuinfo."""
    flags = x86_flags()
    if flags is None:
        pytest.skip("needs an x86 Linux /proc/cpuinfo")
    assert trl_config.cpu_has_native_bf16() is bool({"avx512_bf16", "amx_bf16"} & flags)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_a_torch_without_its_private_feature_checks_cannot_tell(monkeypatch, machine):
    """``cpu_has_native_bf16`` reads torch's private ``torch.cpu._is_avx512_bf16_supported`` /
    ``_is_amx_tile_supported`` (x86) and ``torch.ops.mkldnn._is_mkldnn_bf16_supported`` (elsewhere):
    a torch without them gives None (no warning), never an AttributeError."""
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)

    class NoMkldnn:
        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(torch.ops, "mkldnn", NoMkldnn(), raising=False)
    assert trl_config.cpu_has_native_bf16() is None
