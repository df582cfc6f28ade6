"""verl on a CPU: a platform for verl's ``PlatformRegistry`` and verl's FSDP engine registered for it.

verl 0.9.1 resolves its device once per process (``verl.plugin.platform.get_platform``): it probes
the registered platforms (CUDA, NPU, ROCm) and, finding none, falls back to CUDA, so every
``torch.cuda`` call then fails on a machine without a GPU. verl's registries let a plugin add a
device without patching verl; this module adds one, ``cpu``:

- :class:`CPUPlatform`, registered with ``PlatformRegistry`` under ``"cpu"``: device ``cpu``,
  communication backend ``gloo``, Ray resource ``CPU`` (each worker asks Ray for CPUs; where the
  Ray cluster declares :data:`SLOT` resources, verl's placement bundles ask for one slot each, as
  they ask for one GPU: a node then hosts as many actor workers as it declares slots),
  and a device module (:data:`CPU_DEVICE`) that answers the ``torch.cuda`` calls verl makes
  (memory statistics are 0, seeding seeds the CPU generator, synchronize and empty_cache do nothing);
- verl's FSDP training engine (``FSDPEngineWithLMHead``, registered by verl for ``cuda`` and ``npu``
  only) registered for ``cpu`` in ``EngineRegistry``.

Off unless asked for: :func:`enable` does both; the plugin calls it when ``VERL_PLATFORM=cpu`` is
set (verl's own variable that picks the platform, read in every process, Ray workers included).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

from entflow.errors import UnsupportedVersionError
from entflow.integrations.hooks import SUPPORTED, library_version, signature_of

ENV = "VERL_PLATFORM"  # verl's own switch (platform_manager._detect_platform_name)
NAME = "cpu"
SLOT = "entflow_cpu_slot"  # a Ray resource a node may declare: how many actor workers it hosts


def _cluster_declares(resource: str) -> bool:
    """True when this process is connected to a Ray cluster that declares ``resource``."""
    try:
        import ray

        return bool(ray.is_initialized() and ray.cluster_resources().get(resource, 0) > 0)
    except Exception:  # no Ray, or a cluster that cannot be asked: the plain CPU resource
        return False


class _CPUDevice(ModuleType):
    """The device module verl calls as ``get_torch_device()`` — ``torch.cuda``'s API on the CPU."""

    def __init__(self) -> None:
        super().__init__("entflow_cpu_device")

    def __getattr__(self, name: str) -> Any:  # anything else torch.cpu has (Stream, synchronize, ...)
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> Any:
        return torch.device(NAME)

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * size
        return pages * size, total

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return (0, 0)


CPU_DEVICE = _CPUDevice()
_ENABLED = False


def _platform_class() -> type:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    existing = PlatformRegistry.get(NAME)
    if existing is not None and getattr(existing, "_entflow", False):
        return existing

    @PlatformRegistry.register(platform=NAME)
    class CPUPlatform(PlatformBase):
        """verl platform ``cpu``: gloo, Ray ``CPU`` resources, :data:`CPU_DEVICE` as device module."""

        _entflow = True

        device_name = property(lambda self: NAME)
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: CPU_DEVICE)

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return os.environ.get(ENV, "").strip().lower() == NAME  # never picked by auto-detection

        def current_device(self) -> Any:
            # verl uses this as a device everywhere (``model.to(get_device_id())``, FSDP's
            # ``device_id``); the index 0 would mean accelerator 0, which a CPU-only torch refuses
            return torch.device(NAME)

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "ENTFLOW_CPU_VISIBLE_DEVICES"  # no device list to restrict; verl only reads/sets it

        @contextlib.contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            # verl's placement bundles are {"CPU": k, <this>: 1} (single_controller/ray/base.py:144-148):
            # with the cluster's slots a bundle takes one, so workers spread over nodes as over GPUs
            return SLOT if _cluster_declares(SLOT) else "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_cpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return CPUPlatform


def _gloo_default(original: Any, sig: inspect.Signature) -> Any:
    """``original`` (verl's ``initialize_global_process_group_ray``) asking for ``"gloo"`` when the
    call gives no backend; every argument passed through by name, whatever else the signature holds."""

    def initialize_global_process_group_ray(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:  # a call this signature refuses: verl's own error
            return original(*args, **kwargs)
        if bound.arguments.get("backend") is None:
            bound.arguments["backend"] = "gloo"
        return original(*bound.args, **bound.kwargs)

    initialize_global_process_group_ray.__wrapped__ = original  # type: ignore[attr-defined]
    initialize_global_process_group_ray._entflow_gloo = True  # type: ignore[attr-defined]
    return initialize_global_process_group_ray


def _warn_unpatched(what: str, why: str) -> None:
    warnings.warn(
        f"entflow: verl {library_version('verl')}'s {what} {why}; left as verl has it (entflow's CPU run is "
        f"tested with verl {SUPPORTED['verl']})",
        RuntimeWarning,
        stacklevel=3,
    )


def _gloo_only_process_group() -> None:
    """The one workaround for verl 0.9.x on a CPU (the only place entflow changes verl's behaviour).

    ``verl/utils/distributed.py:89`` (``initialize_global_process_group_ray``) builds the backend
    string ``f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"``, which on the ``cpu`` platform
    is ``"cpu:gloo,cpu:gloo"``; torch refuses it (``ValueError: Duplicate device type cpu in backend
    string: gloo``). This wraps that function so that, when no backend is given, it asks for
    ``"gloo"``. The wrapper takes any arguments and binds them to the signature it finds (verl 0.9's
    is ``(timeout_second=None, backend=None)``), so a verl that adds a parameter keeps working; a
    verl whose function has no ``backend`` parameter is left alone, with one warning naming its
    version. verl's actor workers import the function by name (``verl/workers/engine_workers.py:38``),
    so the wrapper must be in place before that module is imported: the plugin installs it while
    ``import verl`` runs. Everything else verl does is unchanged.
    """
    from verl.utils import distributed

    original = getattr(distributed, "initialize_global_process_group_ray", None)
    if original is None or getattr(original, "_entflow_gloo", False):
        return
    sig = signature_of(original)
    if sig is None or "backend" not in sig.parameters:
        _warn_unpatched(f"initialize_global_process_group_ray{sig or '(unreadable)'}", "has no backend parameter")
        return
    wrapper = _gloo_default(original, sig)
    distributed.initialize_global_process_group_ray = wrapper
    engine_workers = sys.modules.get("verl.workers.engine_workers")
    if engine_workers is not None:  # imported already (in-process use): rebind its copy as well
        engine_workers.initialize_global_process_group_ray = wrapper


def _no_trl(*args: Any, **kwargs: Any) -> bool:
    """verl's ``is_trl_available`` answered False (whatever it is called with)."""
    return False


def _trl_without_value_head() -> None:
    """Second workaround, for verl 0.9.x next to TRL >= 1 (not CPU-specific).

    ``verl/models/transformers/monkey_patch.py:352-356`` (``apply_monkey_patch``, run by the FSDP
    engine for every model it builds) imports ``AutoModelForCausalLMWithValueHead`` from
    ``trl.experimental.ppo`` or ``trl`` whenever TRL is installed, to patch that class's
    ``state_dict``; TRL 1.x has neither, so building the actor fails with ``ImportError: cannot
    import name 'AutoModelForCausalLMWithValueHead' from 'trl'``. Where TRL lacks the class there is
    nothing to patch: verl's ``is_trl_available`` is answered False in that module only (a verl
    whose module no longer has the name is left alone).
    """
    import importlib

    try:
        trl = importlib.import_module("trl")
    except ImportError:
        return
    if hasattr(trl, "AutoModelForCausalLMWithValueHead") or importlib.util.find_spec("trl.experimental.ppo"):
        return
    from verl.models.transformers import monkey_patch

    if callable(getattr(monkey_patch, "is_trl_available", None)):
        monkey_patch.is_trl_available = _no_trl


def _register_engine() -> None:
    """verl's FSDP engine (``FSDPEngineWithLMHead``) for the ``cpu`` device, through verl's public
    ``EngineRegistry.register``; an engine verl (or an earlier call) registered for it is kept.

    Raises:
        UnsupportedVersionError: ``EngineRegistry.register`` does not take
            ``(model_type=, backend=, device=)``, naming verl's version.
    """
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    sig = signature_of(EngineRegistry.register)
    try:
        if sig is not None:
            sig.bind(model_type="language_model", backend="fsdp", device=NAME)
    except TypeError:
        raise UnsupportedVersionError(
            "verl",
            library_version("verl"),
            f"EngineRegistry.register{sig}",
            f"does not take (model_type=, backend=, device=), so the cpu engine cannot be registered; "
            f"entflow's CPU run is tested with verl {SUPPORTED['verl']}",
        ) from None
    for backend in ("fsdp", "fsdp2"):
        try:
            EngineRegistry.register(model_type="language_model", backend=backend, device=NAME)(FSDPEngineWithLMHead)
        except AssertionError:  # verl asserts the key is new: registered already, kept as it is
            pass


def register_platform() -> type:
    """Register :class:`CPUPlatform` as verl's platform ``cpu`` and install the one workaround
    (:func:`_gloo_only_process_group`); no engine import. Returns the class. verl then picks the
    platform on its first ``get_platform()`` when ``VERL_PLATFORM=cpu``."""
    cls = _platform_class()
    _gloo_only_process_group()
    return cls


def enable() -> None:
    """Register the ``cpu`` platform and verl's FSDP engine for it, and make it verl's platform
    in this process. Idempotent."""
    global _ENABLED
    if _ENABLED:
        return
    from verl.plugin.platform import platform_manager

    cls = register_platform()
    # verl's public set_platform; the current one is read (verl keeps it private) only to keep an
    # instance of this class that is already there
    if not isinstance(getattr(platform_manager, "_current_platform", None), cls):
        platform_manager.set_platform(cls())
    _trl_without_value_head()
    _register_engine()
    _ENABLED = True


def requested() -> bool:
    """True when the user asked for verl on a CPU (``VERL_PLATFORM=cpu``)."""
    return os.environ.get(ENV, "").strip().lower() == NAME
