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

import json
import os
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
for _k, _v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
    os.environ.setdefault(_k, _v)

import torch  # noqa: E402

N_PROMPTS, N_PER_PROMPT = 2, 4
LR = 0.1  # SGD: Δθ = -lr·g, so the update carries the gradient's scale (an Adam step would hide it)


def tiny_llama(path: Path) -> str:
    """A 2-layer Llama (transformers ``LlamaConfig``) with the lab's character tokenizer, saved to ``path``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from entflow.lab.policy import build_tokenizer

    tok = build_tokenizer("0123456789+-*() >:=")
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # a peaked output layer: entropies and probabilities spread out
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def rollout(vocab: int, seed: int = 0) -> list[dict]:
    """N_PROMPTS × N_PER_PROMPT responses of ragged lengths, with group-normalised advantages."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for p in range(N_PROMPTS):
        # prompt lengths differ (3, 5, ...): verl's list_of_dict_to_tensordict stacks equal-length
        # fields densely, and its no_padding_2_padding then wants an attention_mask the v1 batch lacks
        prompt = torch.randint(3, vocab, (3 + 2 * p,), generator=g)
        rewards = torch.randn(N_PER_PROMPT, generator=g)
        adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for i in range(N_PER_PROMPT):
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


def overrides(model_dir: str, case: dict, n: int) -> list[str]:
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
        f"actor_rollout_ref.rollout.n={N_PER_PROMPT}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={N_PROMPTS}",
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


def run_case(model_dir: str, case: dict, rows: list[dict]) -> dict:
    from omegaconf import OmegaConf
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import response_from_nested

    import entflow as ef
    from entflow.integrations.verl.check import compose
    from entflow.integrations.verl.losses import VERL_AGG, clip_settings, entflow_ppo_loss
    from entflow.integrations.verl.spec import WORKER_METHODS, spec_from_policy_loss

    n = len(rows)
    cfg = compose(overrides(model_dir, case, n))
    OmegaConf.resolve(cfg)
    WORKER_METHODS.clear()
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    worker.init_model()
    actor_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    if case["path"] == "loss_fn":  # what the entflow trainer mode installs (on_init_end)
        worker.set_loss_fn(partial(entflow_ppo_loss, config=actor_config))
    initial = {k: v.detach().clone().float() for k, v in worker.actor.engine.get_per_tensor_param()[0]}

    # 1. verl's old-log-prob pass (the trainer's _compute_old_log_prob)
    data = v1_batch(rows)
    infer = data.select("prompts", "responses", "response_mask", "loss_mask", "input_ids", "position_ids")
    tu.assign_non_tensor(infer, calculate_entropy=True, compute_loss=False, temperature=1.0)
    out = worker.compute_log_prob(infer)
    old = response_from_nested(out["log_probs"], data["response_mask"])
    old_h = response_from_nested(out["entropy"], data["response_mask"])
    data["old_log_probs"], data["entropy"] = old, old_h

    # 2. verl's update (the trainer's _update_actor: one mini-batch of all responses, one epoch)
    tu.assign_non_tensor(
        data,
        calculate_entropy=bool(actor_config.calculate_entropy),
        global_batch_size=n,
        mini_batch_size=n,
        epochs=1,
        seed=0,
        dataloader_kwargs={"shuffle": False},
        temperature=1.0,
    )
    if case["path"] == "loss_fn":
        tu.assign_non_tensor(data, entflow_step=0, entflow_total_steps=1, entflow_state=None)
    t0 = time.perf_counter()
    metrics = worker.update_actor(data)["metrics"]
    update_s = time.perf_counter() - t0
    after = {k: v.detach().clone().float() for k, v in worker.actor.engine.get_per_tensor_param()[0]}

    # 3. entflow's own update on the same batch, from the same weights
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
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
    ref_after = {k: v.detach().float() for k, v in model.state_dict().items()}  # tied weights under both names

    # per tensor, max-norm relative: ‖θ_verl − θ_entflow‖∞ / ‖θ_entflow‖∞ (and the same for Δθ)
    param_rel, update_rel, update_max, ratio = 0.0, 0.0, 0.0, []
    for k, v in after.items():
        r = ref_after[k]
        param_rel = max(param_rel, float((v - r).abs().max() / r.abs().max().clamp_min(1e-30)))
        du, dr = v - initial[k], r - initial[k]
        update_max = max(update_max, float(dr.abs().max()))
        update_rel = max(update_rel, float((du - dr).abs().max() / dr.abs().max().clamp_min(1e-30)))
        ratio.append(float((du * dr).sum() / (dr * dr).sum().clamp_min(1e-30)))  # Δθ_verl ≈ ratio · Δθ_entflow
    del worker
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


def _first(v):
    if isinstance(v, list):
        v = v[0] if v else None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def main(spec_path: str, out_path: str) -> None:
    from entflow.integrations.verl import cpu

    cpu.enable()
    import torch.distributed as dist

    from support.gloo import free_port

    os.environ.setdefault("MASTER_PORT", str(free_port()))
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1)
    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    model_dir = spec.get("model_dir") or tiny_llama(Path(spec["workdir"]) / "tiny")
    from transformers import AutoConfig

    rows = rollout(AutoConfig.from_pretrained(model_dir).vocab_size, seed=spec.get("seed", 0))
    report = {}
    for case in spec["cases"]:
        try:
            report[case["id"]] = run_case(model_dir, case, rows)
        except Exception as e:  # reported per case; the test names the failing case
            import traceback

            report[case["id"]] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
    Path(out_path).write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
