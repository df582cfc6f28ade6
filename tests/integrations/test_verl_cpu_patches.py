"""What ``integrations/verl/cpu.py`` and ``cpu_rollout.py`` change in verl, against a verl whose
internals moved: the gloo wrapper of ``initialize_global_process_group_ray`` and the replacement of
``monkey_patch.is_trl_available`` take any call (an extra positional and a keyword pass through);
a function without ``backend`` is left alone with a warning naming verl's version; the cpu engine
goes through verl's public ``EngineRegistry.register``; a rollout registry laid out differently is
refused with a typed error naming verl's version; ``enable`` works where verl's private current
platform is gone. Every piece of verl state the tests touch is restored."""

from __future__ import annotations

import copy
import sys
import warnings

import pytest

pytest.importorskip("verl")

from verl.models.transformers import monkey_patch
from verl.plugin.platform import platform_manager
from verl.utils import distributed
from verl.workers.engine.base import EngineRegistry
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry

from entflow.errors import UnsupportedVersionError
from entflow.integrations.hooks import library_version
from entflow.integrations.verl import cpu, cpu_rollout

VERL = library_version("verl")


@pytest.fixture
def verl_state(monkeypatch):
    """Every verl global the tests may change, restored afterwards."""
    name = "initialize_global_process_group_ray"
    monkeypatch.setattr(distributed, name, getattr(distributed, name))
    workers = sys.modules.get("verl.workers.engine_workers")
    if workers is not None:
        monkeypatch.setattr(workers, name, getattr(workers, name))
    monkeypatch.setattr(monkey_patch, "is_trl_available", monkey_patch.is_trl_available)
    monkeypatch.setattr(EngineRegistry, "_engines", copy.deepcopy(EngineRegistry._engines))
    monkeypatch.setattr(rollout_base, "_ROLLOUT_REGISTRY", dict(rollout_base._ROLLOUT_REGISTRY))
    monkeypatch.setattr(RolloutReplicaRegistry, "_registry", dict(RolloutReplicaRegistry._registry))
    monkeypatch.setattr(platform_manager, "_current_platform", platform_manager._current_platform)
    monkeypatch.setattr(cpu, "_ENABLED", False)
    monkeypatch.setattr(cpu_rollout, "_REGISTERED", False)
    return monkeypatch


def test_the_gloo_wrapper_passes_an_extra_positional_and_keyword_through(verl_state):
    calls = []

    def changed(timeout_second=None, world_size=None, backend=None, *, store=None):  # a later verl's
        calls.append({"timeout_second": timeout_second, "world_size": world_size, "backend": backend, "store": store})

    verl_state.setattr(distributed, "initialize_global_process_group_ray", changed)
    cpu._gloo_only_process_group()
    wrapper = distributed.initialize_global_process_group_ray
    assert wrapper is not changed and wrapper.__wrapped__ is changed
    wrapper(30, 2, store="s")
    wrapper(backend="nccl")
    wrapper(5, None, "gloo:x")
    assert calls == [
        {"timeout_second": 30, "world_size": 2, "backend": "gloo", "store": "s"},
        {"timeout_second": None, "world_size": None, "backend": "nccl", "store": None},
        {"timeout_second": 5, "world_size": None, "backend": "gloo:x", "store": None},
    ]
    cpu._gloo_only_process_group()  # once only
    assert distributed.initialize_global_process_group_ray is wrapper


def test_the_gloo_wrapper_over_verls_own_function(verl_state):
    seen = {}
    verl_state.setattr("torch.distributed.is_initialized", lambda: False)
    verl_state.setattr("torch.distributed.init_process_group", lambda **kwargs: seen.update(kwargs))
    cpu._gloo_only_process_group()
    distributed.initialize_global_process_group_ray(timeout_second=5)
    assert seen["backend"] == "gloo" and seen["timeout"].total_seconds() == 5
    distributed.initialize_global_process_group_ray(None, "gloo:y")
    assert seen["backend"] == "gloo:y"


def test_a_function_without_backend_is_left_alone_with_a_warning(verl_state):
    def changed(timeout_second=None, *, options=None):
        return None

    verl_state.setattr(distributed, "initialize_global_process_group_ray", changed)
    with pytest.warns(RuntimeWarning, match=rf"verl {VERL}'s initialize_global_process_group_ray\(timeout_second"):
        cpu._gloo_only_process_group()
    assert distributed.initialize_global_process_group_ray is changed


def test_is_trl_available_is_answered_false_whatever_the_call(verl_state):
    pytest.importorskip("trl")
    verl_state.setattr("importlib.util.find_spec", lambda name, *a: None)  # a TRL without the value-head class
    trl = sys.modules.get("trl") or __import__("trl")
    verl_state.delattr(trl, "AutoModelForCausalLMWithValueHead", raising=False)
    cpu._trl_without_value_head()
    assert monkey_patch.is_trl_available() is False
    assert monkey_patch.is_trl_available("trl", strict=True) is False  # a later verl's call


def test_a_verl_without_is_trl_available_is_left_alone(verl_state):
    pytest.importorskip("trl")
    verl_state.setattr("importlib.util.find_spec", lambda name, *a: None)
    verl_state.delattr(monkey_patch, "is_trl_available")
    cpu._trl_without_value_head()
    assert not hasattr(monkey_patch, "is_trl_available")


def test_the_cpu_engine_goes_through_verls_public_register(verl_state):
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    engines = EngineRegistry._engines
    without_cpu = {k: {b: {d: e for d, e in v.items() if d != "cpu"} for b, v in m.items()} for k, m in engines.items()}
    verl_state.setattr(EngineRegistry, "_engines", without_cpu)
    cpu._register_engine()
    cpu._register_engine()  # registered already: kept, no error
    for backend in ("fsdp", "fsdp2"):
        assert EngineRegistry._engines["language_model"][backend]["cpu"] is FSDPEngineWithLMHead
        assert EngineRegistry._engines["language_model"][backend]["cuda"] is FSDPEngineWithLMHead  # verl's own


def test_a_register_with_an_extra_positional_and_keyword_still_registers(verl_state):
    seen = []

    def register(cls, model_type, backend, device="cuda", vendor=None, priority=0, *, override=False):
        seen.append((model_type, backend, device))
        return lambda engine: engine

    verl_state.setattr(EngineRegistry, "register", classmethod(register))
    cpu._register_engine()
    assert seen == [("language_model", "fsdp", "cpu"), ("language_model", "fsdp2", "cpu")]


def test_a_register_without_device_is_refused_naming_verls_version(verl_state):
    def register(cls, model_type, backend, vendor=None):
        return lambda engine: engine

    verl_state.setattr(EngineRegistry, "register", classmethod(register))
    with pytest.raises(UnsupportedVersionError, match=rf"^verl {VERL}: EngineRegistry.register\(model_type"):
        cpu._register_engine()


def test_the_rollout_is_registered_where_verl_looks_it_up(verl_state):
    cpu_rollout.register()
    assert rollout_base.get_rollout_class("entflow_cpu", "async").__name__ == "CPURollout"
    assert RolloutReplicaRegistry.get("entflow_cpu").__name__ == "CPURolloutReplica"


@pytest.mark.parametrize(
    "change",
    ["classes", "renamed_lookup", "gone"],
)
def test_a_rollout_registry_laid_out_otherwise_is_refused(verl_state, change):
    if change == "classes":  # a later verl keeping classes, not dotted paths
        verl_state.setattr(rollout_base, "_ROLLOUT_REGISTRY", {("vllm", "async"): object})
    elif change == "renamed_lookup":

        def get_rollout_class(name, backend_mode="async", *, strict=False):
            raise AssertionError("never called")

        verl_state.setattr(rollout_base, "get_rollout_class", get_rollout_class)
    else:
        verl_state.delattr(rollout_base, "_ROLLOUT_REGISTRY")
    with pytest.raises(UnsupportedVersionError, match=rf"^verl {VERL}: verl.workers.rollout.base._ROLLOUT_REGISTRY"):
        cpu_rollout.register()
    assert "entflow_cpu" not in RolloutReplicaRegistry._registry


def test_enable_without_verls_private_current_platform(verl_state):
    """``enable`` reads verl's private ``_current_platform`` only to keep an instance already set;
    where it is gone it sets the platform through verl's public ``set_platform``."""
    platforms = []
    verl_state.setattr(platform_manager, "set_platform", platforms.append)
    verl_state.delattr(platform_manager, "_current_platform")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # nothing in verl 0.9 is left unpatched
        cpu.enable()
    assert [p.device_name for p in platforms] == ["cpu"]
    assert distributed.initialize_global_process_group_ray._entflow_gloo
