"""verl's own actor worker, in one CPU process, against entflow's own update on the same batch.

Run as ``python -m support.verl_actor_run SPEC.json OUT.json`` (a fresh process: verl's platform,
its process group and its FSDP engine are per process). SPEC holds ``model_dir`` and ``cases``;
each case is ``{"id", "loss_mode", "method", "params", "path", "agg", "micro", "chunked"}``
(``path``: ``"registry"`` = verl's own ``ppo_loss`` calling the registered ``entflow.<name>``
loss; ``"loss_fn"`` = entflow's ``entflow_ppo_loss`` installed with ``set_loss_fn``, as the
entflow trainer mode does).

For each case, from the same saved weights:

1. verl: ``ActorRolloutRefWorker(role="actor")`` — the worker verl's v1 trainer runs — with
   verl's FSDP2 engine on the ``cpu`` platform; ``compute_log_prob`` (verl's old-log-prob pass,
   which also computes the old entropy) then ``update_actor`` (one mini-batch, one optimizer step),
   on a batch in the v1 trainer's layout (nested tensors, as its agent loop writes them);
2. entflow: the same model loaded with ``transformers``, log-probs and entropy from its logits,
   ``entflow.policy_loss`` on the whole batch, ``backward``, the same optimizer step (SGD).

The report has, per case: the largest relative difference of the parameters after the step
(``param_rel``), of the update ``Δθ`` (``update_rel``), verl's and entflow's old log-probs and
entropies (``old_logp_diff``, ``entropy_diff``), the largest update (``update_max``) and verl's loss.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import torch

N_PROMPTS, N_PER_PROMPT = 2, 4
TOKENS = "0123456789+-*() >:="  # the countdown characters (examples/verl/cpu_prepare.py)
LR = 0.1  # SGD: Δθ = -lr·g, so the update carries the gradient's scale (an Adam step would hide it)


def tiny_llama(path: Path) -> str:
    """A 2-layer Llama with the lab's character tokenizer, saved to ``path``, its output layer
    scaled ×40 (peaked: entropies and probabilities spread out)."""
    from entflow.hf.models import save_tiny_llama
    from entflow.lab.policy import build_tokenizer

    def peaked(model, tok) -> None:
        model.lm_head.weight.mul_(40.0)

    return str(save_tiny_llama(path, build_tokenizer(TOKENS), num_kv_heads=2, adjust=peaked))


def rollout(vocab: int, seed: int = 0, prompts: int = N_PROMPTS, per_prompt: int = N_PER_PROMPT) -> list[dict]:
    """``prompts`` × ``per_prompt`` responses of ragged lengths, with group-normalised advantages."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for p in range(prompts):
        # prompt lengths differ (3, 5, ...): verl's list_of_dict_to_tensordict stacks equal-length
        # fields densely, and its no_padding_2_padding then wants an attention_mask the v1 batch lacks
        prompt = torch.randint(3, vocab, (3 + 2 * p,), generator=g)
        rewards = torch.randn(per_prompt, generator=g)
        adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for i in range(per_prompt):
            T = int(torch.randint(2, 8, (1,), generator=g))
            rows.append(
                {
                    "uid": p,
                    "prompt": prompt,
                    "response": torch.randint(3, vocab, (T,), generator=g),
                    "adv": float(adv[i]),
                }
            )
    return rows


def v1_batch(rows: list[dict]):
    """The batch in verl's v1 layout: one dict per response (as ``AgentLoopWorkerTQ`` writes it to
    TransferQueue), stacked into nested tensors by verl's ``list_of_dict_to_tensordict``."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    fields = []
    for r in rows:
        ids = torch.cat([r["prompt"], r["response"]])
        T = len(r["response"])
        fields.append(
            {
                "prompts": r["prompt"],
                "responses": r["response"],
                "response_mask": torch.ones(T, dtype=torch.int64),
                "loss_mask": torch.ones(T, dtype=torch.int64),
                "input_ids": ids,
                "position_ids": torch.arange(len(ids)),
                "advantages": torch.full((T,), r["adv"]),
            }
        )
    return list_of_dict_to_tensordict(fields)


def padded(rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(advantages, mask, response ids) ``[N, T]``, right-padded."""
    T = max(len(r["response"]) for r in rows)
    mask = torch.zeros(len(rows), T, dtype=torch.bool)
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        mask[i, : len(r["response"])] = True
        ids[i, : len(r["response"])] = r["response"]
    adv = torch.tensor([r["adv"] for r in rows])[:, None] * mask
    return adv, mask, ids


def hf_logp_entropy(model, rows: list[dict], T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies ``[N, T]`` of each response token: one forward of the whole batch,
    sequences right-padded with an attention mask (the layout verl's engine gives the model
    without remove-padding, so float32 round-off is alike on both sides)."""
    seqs = [torch.cat([r["prompt"], r["response"]]) for r in rows]
    L = max(len(x) for x in seqs)
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    am = torch.zeros(len(rows), L, dtype=torch.long)
    pos = torch.zeros(len(rows), L, dtype=torch.long)
    for i, x in enumerate(seqs):
        ids[i, : len(x)], am[i, : len(x)], pos[i, : len(x)] = x, 1, torch.arange(len(x))
    logits = model(input_ids=ids, attention_mask=am, position_ids=pos).logits.float()
    logps, ents = [], []
    for i, r in enumerate(rows):
        P, n = len(r["prompt"]), len(r["response"])
        lg = torch.log_softmax(logits[i, P - 1 : P + n - 1], -1)
        lp = lg.gather(-1, r["response"][:, None])[:, 0]
        h = -(lg.exp() * lg).sum(-1)
        logps.append(torch.nn.functional.pad(lp, (0, T - n)))
        ents.append(torch.nn.functional.pad(h, (0, T - n)))
    return torch.stack(logps), torch.stack(ents)


def overrides(model_dir: str, case: dict, n: int, prompts: int = N_PROMPTS) -> list[str]:
    micro = case.get("micro") or n
    ov = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.dtype=float32",
        # verl's FSDP default computes in bfloat16 (mixed_precision.param_dtype=bf16); float32 throughout
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.actor.optim.optimizer=SGD",
        f"actor_rollout_ref.actor.optim.lr={LR}",
        "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.optim.clip_grad=1000000.0",
        "actor_rollout_ref.actor.optim.total_training_steps=1",
        f"actor_rollout_ref.rollout.n={n // prompts}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={n}",
        f"actor_rollout_ref.actor.loss_agg_mode={case.get('agg', 'token-mean')}",
        f"actor_rollout_ref.actor.calculate_entropy={case['path'] == 'loss_fn'}",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.2",
        "actor_rollout_ref.actor.policy_loss._target_=entflow.integrations.verl.config.EntflowPolicyLossConfig",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={case['loss_mode']}",
        "trainer.device=cpu",
    ]
    if case.get("method"):
        ov.append(f"+actor_rollout_ref.actor.policy_loss.method={case['method']}")
    for k, v in (case.get("params") or {}).items():
        ov.append(f"+actor_rollout_ref.actor.policy_loss.params.{k}={v}")
    if case.get("chunked"):  # verl's chunked entropy, in chunks of 4 tokens
        ov.append("actor_rollout_ref.actor.fsdp_config.entropy_from_logits_with_chunking=True")
        ov.append("actor_rollout_ref.actor.fsdp_config.entropy_from_logits_chunk_size=4")
    if case.get("loss_scale_factor"):
        ov.append(f"actor_rollout_ref.actor.loss_scale_factor={case['loss_scale_factor']}")
    return ov


# cases that change verl's engine (micro-batches, chunked entropy) get a worker of their own
ENGINE_KEYS = ("micro", "chunked")


def build_worker(model_dir: str, case: dict, n: int, prompts: int):
    """verl's ``ActorRolloutRefWorker(role="actor")`` for ``case``'s overrides, its model loaded."""
    from omegaconf import OmegaConf
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from entflow.integrations.verl.check import compose
    from entflow.integrations.verl.spec import WORKER_METHODS

    cfg = compose(overrides(model_dir, case, n, prompts))
    OmegaConf.resolve(cfg)
    WORKER_METHODS.clear()
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    worker.init_model()
    return worker


_COMPOSED: dict[tuple, tuple[list[str], object]] = {}  # (model_dir, n, prompts) -> (base overrides, composed)
HYDRA_CHECK_EVERY = 8  # every 8th case (the first included) is also composed by Hydra and compared
_CASES_SEEN = itertools.count()


def case_actor_config(model_dir: str, case: dict, n: int, prompts: int):
    """verl's resolved actor config for ``case``'s overrides. Hydra's compose takes ~0.5 s, so the
    overrides every case shares are composed once, and a case's own (its loss mode, aggregation,
    parameters, ...) are applied to a copy with Hydra's override parser and ``OmegaConf.update``;
    every :data:`HYDRA_CHECK_EVERY`-th case, and every case with parameters, is composed by Hydra
    too and must give the same config."""
    import copy

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from entflow.integrations.verl.check import compose

    key = (model_dir, n, prompts)
    if key not in _COMPOSED:
        base = overrides(model_dir, {"path": "registry", "loss_mode": "entflow.grpo"}, n, prompts)
        _COMPOSED[key] = (base, compose(base))
    base, composed = _COMPOSED[key]
    ov = overrides(model_dir, case, n, prompts)
    cfg = copy.deepcopy(composed)
    for o in OverridesParser.create().parse_overrides([o for o in ov if o not in base]):
        OmegaConf.update(cfg, o.key_or_group, o.value(), force_add=o.is_add())
    actor = cfg.actor_rollout_ref.actor
    OmegaConf.resolve(actor)
    if next(_CASES_SEEN) % HYDRA_CHECK_EVERY == 0 or case.get("params"):
        theirs = compose(ov).actor_rollout_ref.actor
        OmegaConf.resolve(theirs)
        assert OmegaConf.to_container(theirs) == OmegaConf.to_container(actor), case["id"]
    return actor


def install_case(worker, model_dir: str, case: dict, n: int, prompts: int):
    """Give ``worker`` the loss of ``case`` as verl's worker builds it in ``init_model``: its own
    actor config with the case's policy loss, aggregation and entropy switch, then
    ``partial(ppo_loss, config=...)`` (the registry path) or ``partial(entflow_ppo_loss, config=...)``
    (the loss-function path, as the entflow trainer mode installs it). Returns that config."""
    import copy

    from omegaconf import open_dict
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils.losses import ppo_loss

    from entflow.integrations.verl.losses import entflow_ppo_loss
    from entflow.integrations.verl.spec import WORKER_METHODS

    theirs = case_actor_config(model_dir, case, n, prompts)
    actor = copy.deepcopy(worker.config.actor)
    with open_dict(actor):
        for key in ("policy_loss", "loss_agg_mode", "calculate_entropy", "loss_scale_factor"):
            actor[key] = theirs[key]
    actor_config = omega_conf_to_dataclass(actor)
    actor_config.model_config = worker.actor.config.model_config
    WORKER_METHODS.clear()  # the method is built afresh for each case, as in a fresh worker
    fn = entflow_ppo_loss if case["path"] == "loss_fn" else ppo_loss
    worker.set_loss_fn(partial(fn, config=actor_config))
    return actor_config


def verl_old_pass(worker, rows: list[dict]):
    """verl's old-log-prob pass (the trainer's ``_compute_old_log_prob``): the v1 batch with verl's
    old log-probs and old entropy (nested ``[N, T_i]``)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import response_from_nested

    data = v1_batch(rows)
    infer = data.select("prompts", "responses", "response_mask", "loss_mask", "input_ids", "position_ids")
    tu.assign_non_tensor(infer, calculate_entropy=True, compute_loss=False, temperature=1.0)
    out = worker.compute_log_prob(infer)
    data["old_log_probs"] = response_from_nested(out["log_probs"], data["response_mask"])
    data["entropy"] = response_from_nested(out["entropy"], data["response_mask"])
    return data


def named_local(module) -> dict:
    """``module``'s parameters by name, each as a plain tensor (FSDP2's DTensors on one rank hold the
    whole tensor locally), sharing storage with the module."""
    return {k: (p.to_local() if hasattr(p, "to_local") else p) for k, p in module.named_parameters()}


def run_case(worker, model, data, actor_config, case: dict, rows: list[dict], initial: dict) -> dict:
    """One verl ``update_actor`` and entflow's own update, both from the weights ``initial`` (the
    worker's and ``model``'s parameters are put back there afterwards)."""
    from verl.utils import tensordict_utils as tu

    import entflow as ef
    from entflow.integrations.verl.losses import VERL_AGG, clip_settings
    from entflow.integrations.verl.spec import spec_from_policy_loss

    n = len(rows)
    params = named_local(worker.actor.engine.module)
    old, old_h = data["old_log_probs"], data["entropy"]

    # verl's update (the trainer's _update_actor: one mini-batch of all responses, one epoch)
    batch_v = data.clone()
    tu.assign_non_tensor(
        batch_v,
        calculate_entropy=bool(actor_config.calculate_entropy),
        global_batch_size=n,
        mini_batch_size=n,
        epochs=1,
        seed=0,
        dataloader_kwargs={"shuffle": False},
        temperature=1.0,
    )
    if case["path"] == "loss_fn":
        tu.assign_non_tensor(batch_v, entflow_step=0, entflow_total_steps=1, entflow_state=None)
    t0 = time.perf_counter()
    metrics = worker.update_actor(batch_v)["metrics"]
    update_s = time.perf_counter() - t0
    verl_update = {k: (p.detach() - initial[k]).float() for k, p in params.items()}  # Δθ_verl
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(initial[k])

    # entflow's own update on the same batch, from the same weights
    adv, mask, _ = padded(rows)
    T = mask.shape[1]
    with torch.no_grad():
        ref_old, ref_h = hf_logp_entropy(model, rows, T)
    verl_old = torch.nested.to_padded_tensor(old, 0.0, (n, T)) if old.is_nested else old
    verl_h = torch.nested.to_padded_tensor(old_h, 0.0, (n, T)) if old_h.is_nested else old_h
    logp, h = hf_logp_entropy(model, rows, T)
    spec = spec_from_policy_loss(actor_config.policy_loss)
    method = spec.build()
    method.set_rank(0)
    clip_low, clip_high, dual = clip_settings(actor_config, spec, method)
    loss_spec = ef.LossSpec(clip_low, clip_high, dual, VERL_AGG[actor_config.loss_agg_mode]).for_method(method)
    batch = ef.TokenBatch(
        logp, ref_old, adv, mask, entropy=h if case["path"] == "loss_fn" else None, old_entropy=ref_h, step=0,
        total_steps=1,
    )  # fmt: skip
    out_ef = ef.policy_loss(batch, method, loss_spec)
    loss = out_ef.loss
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    opt.zero_grad()
    loss.backward()
    opt.step()
    ref_params = dict(model.named_parameters())  # tied weights once, as in verl's module
    assert ref_params.keys() == params.keys(), sorted(set(ref_params) ^ set(params))

    # per tensor, max-norm relative: ‖θ_verl − θ_entflow‖∞ / ‖θ_entflow‖∞ (and the same for Δθ)
    param_rel, update_rel, update_max, ratio = 0.0, 0.0, 0.0, []
    for k, p in ref_params.items():
        r = p.detach().float()
        du, dr = verl_update[k], (p.detach() - initial[k]).float()
        param_rel = max(param_rel, float((initial[k] + du - r).abs().max() / r.abs().max().clamp_min(1e-30)))
        update_max = max(update_max, float(dr.abs().max()))
        update_rel = max(update_rel, float((du - dr).abs().max() / dr.abs().max().clamp_min(1e-30)))
        ratio.append(float((du * dr).sum() / (dr * dr).sum().clamp_min(1e-30)))  # Δθ_verl ≈ ratio · Δθ_entflow
    with torch.no_grad():
        for k, p in ref_params.items():
            p.copy_(initial[k])
    model.zero_grad(set_to_none=True)
    return {
        "param_rel": param_rel,
        "update_rel": update_rel,
        "update_max": update_max,
        "update_ratio": sum(ratio) / len(ratio),
        "old_logp_diff": float(((verl_old - ref_old) * mask).abs().max()),
        "entropy_diff": float(((verl_h - ref_h) * mask).abs().max()),
        "loss_entflow": float(loss),
        "pg_loss_entflow": float(out_ef.metrics.get("pg_loss", float("nan"))),
        "verl_pg_loss": _first(metrics.get("pg_loss", metrics.get("actor/pg_loss"))),
        "entflow_metrics": sorted(k for k in metrics if k.startswith("entflow/")),
        "update_s": update_s,
    }


def run_cases(model_dir: str, cases: list[dict], rows: list[dict], prompts: int) -> dict:
    """Every case, each from the saved weights: the cases that keep verl's engine as it is share one
    worker (one model load, one FSDP wrap, one old-log-prob pass), the others get their own."""
    from transformers import AutoModelForCausalLM

    n = len(rows)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    groups: list[list[dict]] = [[c for c in cases if not any(c.get(k) for k in ENGINE_KEYS)]]
    groups += [[c] for c in cases if any(c.get(k) for k in ENGINE_KEYS)]
    report: dict = {}
    for group in filter(None, groups):
        worker = build_worker(model_dir, group[0], n, prompts)
        initial = {k: p.detach().clone() for k, p in named_local(worker.actor.engine.module).items()}
        data = verl_old_pass(worker, rows)
        for case in group:
            t0 = time.perf_counter()
            try:
                actor_config = install_case(worker, model_dir, case, n, prompts)
                report[case["id"]] = run_case(worker, model, data, actor_config, case, rows, initial)
            except Exception as e:  # reported per case; the test names the failing case
                import traceback

                report[case["id"]] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
            print(f"{case['id']}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        del worker
    return report


def _first(v):
    if isinstance(v, list):
        v = v[0] if v else None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _one_rank_environment() -> None:
    """verl's platform and a one-rank process group's variables, set in this process only: set at
    import, they would leak into a test process that imports ``tiny_llama``, and every trainer built
    there (accelerate reads them) would then open a process group on the default port."""
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(k, v)


def main(spec_path: str, out_path: str) -> None:
    _one_rank_environment()
    from entflow.integrations.verl import cpu

    cpu.enable()
    import torch.distributed as dist

    from support.gloo import free_port

    os.environ.setdefault("MASTER_PORT", str(free_port()))
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1)
    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    global LR
    LR = spec.get("lr", LR)  # the SGD step of both sides
    model_dir = spec.get("model_dir") or tiny_llama(Path(spec["workdir"]) / "tiny")
    from transformers import AutoConfig

    prompts, per_prompt = spec.get("prompts", N_PROMPTS), spec.get("per_prompt", N_PER_PROMPT)
    rows = rollout(AutoConfig.from_pretrained(model_dir).vocab_size, spec.get("seed", 0), prompts, per_prompt)
    t0 = time.perf_counter()
    report = run_cases(model_dir, spec["cases"], rows, prompts)
    report["_seconds"] = time.perf_counter() - t0
    Path(out_path).write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
