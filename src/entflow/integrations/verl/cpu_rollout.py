"""A CPU rollout backend for verl's v1 trainer: ``actor_rollout_ref.rollout.name=entflow_cpu``.

verl's rollout is a server per replica (vLLM, SGLang or TRT-LLM) that answers token-in/token-out
``generate`` calls from verl's agent loop, and a ``BaseRollout`` inside each actor worker that
receives the trained weights (verl's ``naive`` weight sync, ``ActorRolloutRefWorker.update_weights``).
This module gives both for a CPU, generating with ``transformers``:

- :class:`CPURolloutServer`: a Ray actor holding a ``transformers`` copy of the policy;
  ``generate`` samples one response (temperature, top-p, top-k as verl passes them; the response
  length from ``rollout.response_length``) and returns verl's ``TokenOutput`` (with per-token
  log-probs when ``rollout.calculate_log_probs``). The memory calls verl makes around weight sync
  (``sleep``, ``wake_up``, KV-cache release) have nothing to free on a CPU and return at once.
- :class:`CPURolloutReplica` (registered with ``RolloutReplicaRegistry``): starts one server per
  replica, named ``entflow_cpu_rollout_<replica rank>``, on the node of the replica's actor worker
  (as verl places vLLM's servers), so on several Ray nodes each node generates with its own server.
- :class:`CPURollout` (the worker-side ``BaseRollout``): ``update_weights`` collects the full
  weights verl's FSDP engine yields (every rank must consume them: gathering a sharded tensor is
  collective) and the first rank of each replica sends them to that replica's server.

One replica per actor worker (``rollout.tensor_model_parallel_size=1``), so with 2 workers there
are 2 servers, each generating half of the batch. Registered by :func:`register` (the plugin
calls it when ``VERL_PLATFORM=cpu``).

**Seeding.** Each response is sampled with its own generator, seeded from ``rollout.seed``, the
weights version it is generated with (verl's ``global_steps`` of the last weight sync) and the
prompt with its draw number: the k-th request for a prompt at a weights version (k counted by
:class:`DrawCounter`, one Ray actor shared by all replicas). So a step's responses, as a multiset
per prompt, depend only on the seed, the weights and the prompts: not on which replica verl's load
balancer routes a request to, nor on the order requests arrive in, nor on what the servers
generated before (a run resumed from a checkpoint draws what the uninterrupted run drew). Which of
a prompt's n requests gets which draw still follows arrival order, and verl orders the batch by
completion (docs/integrations.md, "Resuming, measured").
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Any

import torch

NAME = "entflow_cpu"
SERVER_PREFIX = "entflow_cpu_rollout_"
COUNTER_NAME = "entflow_cpu_rollout_draws"


def draw_seed(seed: int, weights_version: int | None, prompt_ids: list[int], draw: int) -> int:
    """The generator seed of one response: a hash of the rollout seed, the weights version, the
    prompt's token ids and the draw number (the k-th request for that prompt at that version)."""
    key = f"{seed}|{-1 if weights_version is None else weights_version}|{draw}|{','.join(map(str, prompt_ids))}"
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") & (2**63 - 1)


class DrawCounter:
    """How many responses each prompt has had at each weights version: ``next`` returns 0, 1, 2, …
    for the same key. One instance (a Ray actor, ``COUNTER_NAME``) serves every replica of a run;
    a server without one (a test, no Ray) counts for itself. Versions older than the newest two are
    dropped."""

    def __init__(self) -> None:
        self.counts: dict[int, dict[str, int]] = {}

    def next(self, version: int, key: str) -> int:
        seen = self.counts.setdefault(version, {})
        k = seen.get(key, 0)
        seen[key] = k + 1
        for old in sorted(self.counts)[:-2]:
            del self.counts[old]
        return k


class CPURolloutServer:
    """One rollout replica's generation server (a Ray actor): ``transformers`` sampling on the CPU."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int, draws: Any = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from verl.utils.config import omega_conf_to_dataclass

        model_config = omega_conf_to_dataclass(model_config)  # verl's HFModelConfig (local_path)
        torch.set_num_threads(int(os.environ.get("ENTFLOW_CPU_ROLLOUT_THREADS", "1")))
        self.config = config
        self.replica_rank = replica_rank
        path = model_config.local_path
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=model_config.trust_remote_code)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.model.eval()
        self.weights_version: int | None = None
        self.seed = int(getattr(config, "seed", 0) or 0)
        self.draws = draws  # the run's DrawCounter actor; None: count here
        self._local_draws = DrawCounter()

    # -- weights ------------------------------------------------------------------------------
    def set_weights(self, named: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Load the trainer's weights (names as in the Hugging Face model); returns how many."""
        state = self.model.state_dict()
        unknown = [k for k in named if k not in state]
        if unknown:
            raise KeyError(f"entflow_cpu rollout: weights the model does not have: {unknown[:5]}")
        with torch.no_grad():
            for k, v in named.items():
                state[k].copy_(v.to(state[k].dtype))
        self.weights_version = global_steps
        return len(named)

    # -- generation -----------------------------------------------------------------------------
    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        if image_data is not None or video_data is not None:
            raise NotImplementedError("the entflow_cpu rollout generates text only")
        limit = int(self.config.response_length)
        max_len = getattr(self.config, "max_model_len", None)
        if max_len:
            limit = max(1, min(limit, int(max_len) - len(prompt_ids)))
        if sampling_params.get("max_tokens"):
            limit = min(limit, int(sampling_params["max_tokens"]))
        temperature = float(sampling_params.get("temperature", 1.0) or 0.0)
        top_p = float(sampling_params.get("top_p", 1.0) or 1.0)
        top_k = int(sampling_params.get("top_k", -1) or -1)
        generator = None
        if temperature > 0:
            version = -1 if self.weights_version is None else int(self.weights_version)
            key = ",".join(map(str, prompt_ids))
            if self.draws is not None:
                draw = await self.draws.next.remote(version, key)
            else:
                draw = self._local_draws.next(version, key)
            generator = torch.Generator().manual_seed(draw_seed(self.seed, self.weights_version, prompt_ids, draw))
        ids = self._sample(prompt_ids, limit, temperature, top_p, top_k, generator)
        log_probs = self._log_probs(prompt_ids, ids, temperature) if sampling_params.get("logprobs") else None
        finished = bool(ids) and ids[-1] in self._eos_ids()
        return TokenOutput(
            token_ids=ids,
            log_probs=log_probs,
            stop_reason="completed" if finished or len(ids) >= limit else None,
            extra_fields={"global_steps": self.weights_version},
        )

    def _eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return set(eos if isinstance(eos, list) else [eos]) - {None}

    @torch.no_grad()
    def _sample(
        self,
        prompt_ids: list[int],
        limit: int,
        temperature: float,
        top_p: float,
        top_k: int,
        generator: torch.Generator | None = None,
    ) -> list[int]:
        """Token-by-token sampling with a KV cache: softmax(z / T), then top-k, then top-p (nucleus),
        drawing from ``generator`` (greedy when ``temperature`` <= 0)."""
        eos = self._eos_ids()
        x = torch.tensor([prompt_ids])
        past = None
        out: list[int] = []
        for _ in range(limit):
            res = self.model(input_ids=x, past_key_values=past, use_cache=True)
            past = res.past_key_values
            z = res.logits[0, -1].float()
            if temperature <= 0:
                tok = int(z.argmax())
            else:
                p = torch.softmax(z / temperature, -1)
                if 0 < top_k < p.numel():
                    kth = torch.topk(p, top_k).values[-1]
                    p = torch.where(p >= kth, p, torch.zeros_like(p))
                if top_p < 1.0:
                    sp, order = torch.sort(p, descending=True)
                    keep = torch.cumsum(sp, 0) - sp < top_p * sp.sum()  # smallest prefix with mass >= top_p
                    p = torch.zeros_like(p).scatter(0, order, sp * keep)
                tok = int(torch.multinomial(p / p.sum(), 1, generator=generator))
            out.append(tok)
            if tok in eos:
                break
            x = torch.tensor([[tok]])
        return out

    @torch.no_grad()
    def _log_probs(self, prompt_ids: list[int], ids: list[int], temperature: float) -> list[float]:
        """log softmax(z / T) of each sampled token under the rollout's weights (what vLLM reports)."""
        if not ids:
            return []
        x = torch.tensor([prompt_ids + ids])
        z = self.model(input_ids=x).logits[0, len(prompt_ids) - 1 : -1].float()
        lp = torch.log_softmax(z / (temperature if temperature > 0 else 1.0), -1)
        return lp.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()

    # -- what verl calls around weight sync and partial rollout: nothing to do on a CPU ---------
    async def sleep(self) -> None:
        return None

    async def wake_up(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


def server_name(replica_rank: int, suffix: str = "") -> str:
    return f"{SERVER_PREFIX}{replica_rank}{suffix}"


def _replica_class() -> type:
    import ray
    from verl.workers.rollout.replica import RolloutReplica

    class CPURolloutReplica(RolloutReplica):
        """verl rollout replica ``entflow_cpu``: one :class:`CPURolloutServer` Ray actor."""

        def rollout_worker_use_gpu(self) -> bool:
            return False

        async def launch_servers(self) -> None:
            name = server_name(self.replica_rank, self.name_suffix)
            env = {k: v for k, v in os.environ.items() if k.startswith(("VERL_", "ENTFLOW_"))}
            draws = ray.remote(DrawCounter).options(name=COUNTER_NAME, num_cpus=0, get_if_exists=True).remote()
            where = {}
            if self.workers:  # on the node of the replica's first actor worker, as verl places vLLM's server
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                node = await self.workers[0].__ray_call__.remote(lambda w: ray.get_runtime_context().get_node_id())
                where = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False)}
            server = (
                ray.remote(CPURolloutServer)
                .options(
                    name=name,
                    num_cpus=0,
                    max_concurrency=self.max_concurrency,
                    runtime_env={"env_vars": env},
                    **where,
                )
                .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank, draws=draws)
            )
            await server.sleep.remote()  # fails here, not at the first request, if the server cannot start
            self.servers = [server]
            self._server_handle = server
            self._server_address = name  # a key for verl's router; there is no HTTP endpoint

    return CPURolloutReplica


def _rollout_class() -> type:
    from verl.workers.rollout.base import BaseRollout

    class CPURollout(BaseRollout):
        """The actor worker's side of the ``entflow_cpu`` rollout: forwards the trained weights."""

        def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, model_config, device_mesh, *args, **kwargs)
            import torch.distributed as dist

            rank = dist.get_rank() if dist.is_initialized() else 0
            tp = int(self.config.tensor_model_parallel_size or 1)
            self.replica_rank, self.is_sender = rank // tp, rank % tp == 0

        async def resume(self, tags: list[str]) -> None:
            return None

        async def release(self) -> None:
            return None

        async def update_weights(self, weights: Iterable, wire_format: str = "named_tensors", **kwargs: Any) -> None:
            if wire_format != "named_tensors":
                raise NotImplementedError(f"the entflow_cpu rollout takes full weights, not {wire_format!r}")
            named = {name: t.detach().to("cpu", copy=True) for name, t in weights}  # every rank: collective gathers
            if not self.is_sender:
                return
            import ray

            server = ray.get_actor(server_name(self.replica_rank))
            await server.set_weights.remote(named, kwargs.get("global_steps"))

    return CPURollout


_REGISTERED = False


def register() -> None:
    """Register the ``entflow_cpu`` rollout with verl (idempotent).

    ``RolloutReplicaRegistry.register`` is verl's public hook for a replica. The worker-side class
    is looked up in ``verl/workers/rollout/base.py``'s ``_ROLLOUT_REGISTRY`` (a dict from
    ``(name, mode)`` to the class's dotted path, read by ``get_rollout_class``, with no register
    function in verl 0.9.0 or 0.9.1), so entflow adds its entry there, after checking that the dict
    still has that layout.

    Raises:
        UnsupportedVersionError: verl's rollout registry is not laid out as in verl 0.9 (naming its
            version), instead of verl's "Rollout entflow_cpu with mode async not found" at startup.
    """
    global _REGISTERED
    if _REGISTERED:
        return
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from entflow.errors import UnsupportedVersionError
    from entflow.integrations.hooks import SUPPORTED, library_version, signature_of

    registry = getattr(base, "_ROLLOUT_REGISTRY", None)
    lookup = signature_of(getattr(base, "get_rollout_class", None))
    laid_out = (
        isinstance(registry, dict)
        and all(isinstance(k, tuple) and len(k) == 2 and isinstance(v, str) for k, v in registry.items())
        and lookup is not None
        and tuple(lookup.parameters)[:2] == ("rollout_name", "mode")
    )
    if not laid_out:
        raise UnsupportedVersionError(
            "verl",
            library_version("verl"),
            "verl.workers.rollout.base._ROLLOUT_REGISTRY",
            f"is not the {{(name, mode): 'module.Class'}} dict read by get_rollout_class(rollout_name, mode), "
            f"so the {NAME} rollout cannot be registered; entflow's CPU run is tested with verl {SUPPORTED['verl']}",
        )
    RolloutReplicaRegistry.register(NAME, _replica_class)
    registry[(NAME, "async")] = f"{__name__}.CPURollout"
    _REGISTERED = True


def __getattr__(name: str) -> Any:  # the classes need verl; built on first use
    if name == "CPURollout":
        return _rollout_class()
    if name == "CPURolloutReplica":
        return _replica_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
