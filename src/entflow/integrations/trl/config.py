"""``EntflowGRPOConfig``: ``trl.GRPOConfig`` plus the entflow method, and the checks that refuse
TRL options a method cannot combine with (docs/design.md §12, docs/integrations.md).
"""

from __future__ import annotations

import json
import platform
import warnings
from dataclasses import dataclass, field, fields

import torch
from trl import GRPOConfig

from entflow.core.advantages import SCALES
from entflow.core.clip_settings import CLIP_EPS
from entflow.errors import ConfigError, EmulatedBF16Warning, EntflowError
from entflow.methods.base import Method, get_method
from entflow.methods.needs import needs_of

__all__ = [
    "LOSS_TYPE_AGG",
    "REFERENCE_ONLY_BETA",
    "SCALES",
    "EntflowGRPOConfig",
    "build_method",
    "check_compatibility",
    "from_trl_config",
    "trl_beta",
    "trl_computes_update",
    "trl_only_options",
    "warn_if_cpu_emulates_bf16",
]

# TRL's ``beta`` for a method that reads reference log-probs without ``kl_ref`` (archer): any
# value ≠ 0 makes TRL 1.16 load the reference model and put ``ref_per_token_logps`` in the batch
# (``GRPOTrainer.__init__`` / ``_generate_and_score_completions``). TRL uses beta nowhere else but
# in its own ``_compute_loss``, which EntflowGRPOTrainer replaces by entflow's ``policy_loss``: TRL's
# KL term is never added, the method's own KL is the only one.
REFERENCE_ONLY_BETA = 1.0

# TRL loss_type → entflow aggregation (docs/design.md §4). ``dapo`` and ``bnpo`` are both token means; they
# differ in the denominator (global token count of the optimizer step vs the micro-batch's).
LOSS_TYPE_AGG = {
    "dapo": "token-mean",
    "bnpo": "token-mean",
    "grpo": "seq-mean-token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
}

# TRL loss_type values that are entflow methods rather than aggregations: (method, the loss_type that
# normalises as TRL does for it). TRL's luspo divides like its grpo; its vespo like its dapo.
TRL_LOSS_TYPE_METHODS = {
    "cispo": ("cispo", "dapo"),
    "sapo": ("sapo", "grpo"),
    "vespo": ("vespo", "dapo"),
    "luspo": ("luspo", "grpo"),
}


@dataclass
class EntflowGRPOConfig(GRPOConfig):
    """``trl.GRPOConfig`` plus the entflow method.

    Validated when built: an unknown method or parameter, or a TRL option that cannot combine
    with the method, raises :class:`entflow.ConfigError` naming the field, before any model is
    loaded or any completion generated.
    """

    entflow_method: str = field(
        default="grpo",
        metadata={"help": "entflow method or composition 'a+b' (see `entflow methods`); 'grpo' = TRL's loss."},
    )
    entflow_method_params: dict | str | None = field(
        default=None,
        metadata={
            "help": "Parameters of the method, e.g. {'lambda_min': 0.8} or {'steer.lambda_min': 0.8} in a "
            "composition. A JSON string is accepted (command line)."
        },
    )
    entflow_global_stats: bool = field(
        default=True,
        metadata={
            "help": "Batch statistics (STEER max|Ω|, OPEFO S±, Cov means, quantiles, random draws) over all "
            "micro-batches of an optimizer step and all processes (True), or per micro-batch (False, as verl)."
        },
    )
    entflow_advantage_eps: float = field(
        default=1e-4,
        metadata={"help": "Added to the reward std in the advantages (TRL uses 1e-4; docs/design.md §1 uses 1e-6)."},
    )
    entflow_chunk_size: int | None = field(
        default=256,
        metadata={"help": "Token rows per softmax chunk in the rollout pass that the tabular estimator needs."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.entflow_method_params, str):
            try:
                self.entflow_method_params = json.loads(self.entflow_method_params)
            except json.JSONDecodeError as e:
                raise ConfigError("entflow_method_params", f"is not valid JSON: {e}") from e
        if self.entflow_method_params is None:
            self.entflow_method_params = {}
        if not isinstance(self.entflow_method_params, dict):
            raise ConfigError(
                "entflow_method_params",
                f"must be a dict (or JSON object), got {type(self.entflow_method_params).__name__}",
            )
        if not self.entflow_advantage_eps >= 0:
            raise ConfigError("entflow_advantage_eps", f"must be >= 0, got {self.entflow_advantage_eps}")
        if self.entflow_chunk_size is not None and self.entflow_chunk_size < 1:
            raise ConfigError("entflow_chunk_size", f"must be None or >= 1, got {self.entflow_chunk_size}")
        method = build_method(self)
        check_compatibility(self, method)
        self.beta = trl_beta(self, method)
        warn_if_cpu_emulates_bf16(self)


def from_trl_config(args: GRPOConfig) -> EntflowGRPOConfig:
    """A plain ``trl.GRPOConfig`` as an :class:`EntflowGRPOConfig`: every TRL field as the user set
    it (already validated by TRL's ``__post_init__``, which is not run again) and entflow's fields
    at their defaults, i.e. ``entflow_method="grpo"``. ``args`` itself is left unchanged."""
    if isinstance(args, EntflowGRPOConfig):
        return args
    if not isinstance(args, GRPOConfig):
        raise ConfigError("args", f"must be a trl.GRPOConfig or EntflowGRPOConfig, got {type(args).__name__}")
    new = EntflowGRPOConfig.__new__(EntflowGRPOConfig)
    new.__dict__.update(args.__dict__)
    for f in fields(EntflowGRPOConfig):
        if f.name.startswith("entflow_"):
            setattr(new, f.name, f.default)
    new.entflow_method_params = {}
    return new


def cpu_has_native_bf16() -> bool | None:
    """Whether this CPU has bfloat16 arithmetic instructions; None where this torch build cannot tell.

    On x86: AVX512-BF16 or AMX (``torch.cpu``'s feature checks). oneDNN's own test
    (``torch.ops.mkldnn._is_mkldnn_bf16_supported``) says yes on any AVX-512 CPU, where bfloat16 is
    converted to float32 and back around float32 arithmetic: on a 2-core AVX-512 Xeon without
    AVX512-BF16 autocast was slower than float32 (docs/benchmarks.md, "bf16 autocast on a CPU").
    Elsewhere (ARM), oneDNN's test.
    """
    try:
        if platform.machine().lower() in ("x86_64", "amd64", "i686", "i386"):
            return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return None


def warn_if_cpu_emulates_bf16(args: GRPOConfig) -> bool:
    """Warn (:class:`entflow.errors.EmulatedBF16Warning`) when ``args`` trains on a CPU under
    bfloat16 autocast that the CPU emulates; returns whether it warned.

    ``GRPOConfig`` defaults to ``bf16=True``, and with ``use_cpu=True`` (transformers refuses bf16
    without it on a machine with no GPU) that autocasts the forward and backward to bfloat16. A CPU
    without bfloat16 arithmetic instructions emulates it: a SmolLM2-sized MLP's forward + backward was
    several times slower than in float32, on an AVX2 AMD EPYC and on an AVX-512 Xeon without
    AVX512-BF16 (docs/benchmarks.md, "bf16 autocast on a CPU").
    ``bf16=False`` trains in float32.
    """
    if not (args.bf16 and args.use_cpu) or cpu_has_native_bf16() is not False:
        return False
    warnings.warn(
        EmulatedBF16Warning(
            f"bf16=True trains under bfloat16 autocast on this CPU, which has no bfloat16 arithmetic "
            f"instructions (no AVX512-BF16 or AMX; torch CPU capability {torch.backends.cpu.get_cpu_capability()}): "
            "it is emulated through float32, slower than float32 itself. Set bf16=False to train in float32."
        ),
        stacklevel=4,  # the user's EntflowGRPOConfig(...) line: ← __init__ ← __post_init__ ← here
    )
    return True


def trl_beta(args: GRPOConfig, method: Method) -> float:
    """The ``beta`` TRL must hold for ``method``: ``kl_ref.beta`` with ``kl_ref``;
    :data:`REFERENCE_ONLY_BETA` for another method that reads ``ref_logp`` (TRL computes reference
    log-probs only when beta ≠ 0; the KL in the loss is the method's own); else ``args.beta``."""
    kl = _part(method, "kl_ref")
    if kl is not None:
        return kl.beta
    if needs_of(method).ref_logp:
        return REFERENCE_ONLY_BETA
    return args.beta


def build_method(args: EntflowGRPOConfig) -> Method:
    """The method ``args`` names, built with its parameters (:class:`ConfigError` naming the field)."""
    name = args.entflow_method
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("entflow_method", f"must be a method name or 'a+b' composition, got {name!r}")
    params = dict(args.entflow_method_params or {})
    try:
        return get_method(name, **params)
    except EntflowError as e:
        key = "entflow_method_params" if params and "unknown method" not in str(e) else "entflow_method"
        raise ConfigError(key, str(e)) from e


def _part(method: Method, name: str) -> Method | None:
    return next((p for p in method.parts if p.name == name), None)


def trl_only_options(args: GRPOConfig) -> tuple[str, ...]:
    """The TRL options ``args`` sets that entflow's own loss and advantages do not compute (TRL's
    other loss types, sequence-level ratios, per-reward normalisation, its entropy mask and bonus,
    its off-policy mask, its KL to the reference, a two-sided clip that is not a dual clip).

    With ``entflow_method="grpo"`` and any of them, :class:`EntflowGRPOTrainer` leaves the
    advantages and the loss to TRL's own ``GRPOTrainer``: the update is TRL's."""
    eps_high = args.epsilon if args.epsilon_high is None else args.epsilon_high
    found = {
        "loss_type": args.loss_type not in LOSS_TYPE_AGG,
        "importance_sampling_level": args.importance_sampling_level != "token",
        "multi_objective_aggregation": args.multi_objective_aggregation != "sum_then_normalize",
        "scale_rewards": args.scale_rewards not in SCALES,
        "top_entropy_quantile": args.top_entropy_quantile < 1.0,
        "entropy_coef": args.entropy_coef != 0.0,
        "use_adaptive_entropy": bool(args.use_adaptive_entropy),
        "off_policy_mask_threshold": args.off_policy_mask_threshold is not None,
        "beta": args.beta != 0.0,
        "delta": args.delta is not None and not args.delta > 1 + eps_high,
    }
    return tuple(k for k, on in found.items() if on)


def trl_computes_update(args: GRPOConfig, method: Method) -> bool:
    """Whether the adapter hands advantages and loss to TRL: plain ``grpo`` with a TRL-only option."""
    return method.name == "grpo" and bool(trl_only_options(args))


def check_compatibility(args: GRPOConfig, method: Method) -> None:
    """Refuse TRL options that would silently change or be silently ignored by ``method``.

    With ``grpo`` nothing is refused: a TRL-only option hands the update to TRL
    (:func:`trl_computes_update`). With another method, each refusal is a :class:`ConfigError`
    naming the TRL field and saying why, and what to use instead.
    """
    if trl_computes_update(args, method):
        return
    m = method.name

    def refuse(key: str, why: str) -> None:
        raise ConfigError(key, f"{why} (entflow_method={m!r})")

    if args.loss_type not in LOSS_TYPE_AGG:
        entflow_name = TRL_LOSS_TYPE_METHODS.get(args.loss_type)
        instead = (
            f"; TRL's {args.loss_type!r} is entflow's method {entflow_name[0]!r}: write "
            f"entflow_method='{entflow_name[0]}' with loss_type='{entflow_name[1]}'"
            if entflow_name
            else ""
        )
        refuse(
            "loss_type",
            f"{args.loss_type!r} is not a PPO-clip loss; entflow methods act on PPO-clip. "
            f"Use one of {', '.join(LOSS_TYPE_AGG)}{instead}",
        )
    if args.importance_sampling_level != "token":
        refuse("importance_sampling_level", "entflow methods are token-level; use 'token'")
    if args.multi_objective_aggregation != "sum_then_normalize":
        refuse(
            "multi_objective_aggregation",
            "entflow builds advantages from the weighted reward sum ('sum_then_normalize') and its groups",
        )
    if args.scale_rewards not in SCALES:
        refuse("scale_rewards", f"must be one of {SCALES}, got {args.scale_rewards!r}")
    # top_entropy_quantile, off_policy_mask_threshold, entropy_coef and use_adaptive_entropy compose with
    # every method: the adapter applies TRL's masks to the method's policy-gradient term and adds TRL's
    # entropy bonus to the method's loss, as TRL does to its own loss
    needs = needs_of(method)
    if needs.aggregation is not None and LOSS_TYPE_AGG.get(args.loss_type) != needs.aggregation:
        fitting = [k for k, v in LOSS_TYPE_AGG.items() if v == needs.aggregation]
        refuse(
            "loss_type",
            f"the method is a sequence-level loss that fixes the aggregation {needs.aggregation!r}, but "
            f"loss_type={args.loss_type!r} normalises as {LOSS_TYPE_AGG.get(args.loss_type)!r}; use loss_type="
            f"{fitting[0]!r}",
        )
    if needs.entropy_top_p is not None:
        raise ConfigError(
            "entflow_method_params",
            f"top_p = {needs.entropy_top_p}: {m} would differentiate the entropy of the top-p nucleus "
            "(arXiv 2509.25133), which needs the full logits, but TRL's fused head gives the loss only the full "
            "entropy. Set top_p = 1 (the full entropy, the paper's 'w/o top-p' ablation), or train in the lab / "
            "the generic trainer, which computes the top-p entropy",
        )
    if needs.temperature_samples:
        raise ConfigError(
            "entflow_method",
            f"{m} trains on extra responses sampled at its own temperature (arXiv 2510.08141), which TRL does not "
            "draw; without them it is plain GRPO. Use the lab / the generic trainer",
        )
    if needs.topk is not None:
        raise ConfigError(
            "entflow_method",
            f"{m} reads the log-probs of the top-{needs.topk} candidates at each token (arXiv 2510.14807), "
            "which need the logits, but TRL's loss sees only the sampled tokens' log-probs. "
            "Use the lab / the generic trainer",
        )
    per_group = [f for f in ("rewards", "group_index") if f in needs.loss_fields]
    if per_group:
        raise ConfigError(
            "entflow_method",
            f"{m} reads {' and '.join(per_group)} in the loss, which TRL's micro-batches do not carry. "
            "Use the lab / the generic trainer",
        )
    if needs.greedy_baseline:
        raise ConfigError(
            "entflow_method",
            f"{m}: {', '.join(needs.greedy_baseline)} takes the reward of a greedy response to each prompt as its "
            "baseline (ReMax, arXiv 2310.10505), an extra rollout that TRL does not draw. Use verl's own "
            "adv_estimator=remax, or another estimator (rloo, grpo)",
        )
    if needs.rollout_logp and args.use_vllm and args.vllm_importance_sampling_correction:
        refuse(
            "vllm_importance_sampling_correction",
            f"{m} corrects the rollout–training mismatch itself from vLLM's log-probs; TRL's importance-sampling "
            "ratio on top would correct it twice. Set vllm_importance_sampling_correction=False",
        )
    kl = _part(method, "kl_ref")
    ref_only = needs.ref_logp and kl is None  # e.g. archer: TRL's beta only loads the reference
    if ref_only and args.beta not in (0.0, REFERENCE_ONLY_BETA):
        refuse(
            "beta",
            f"{m} computes its own KL to the reference; TRL's beta only makes TRL load the reference model "
            f"(the adapter sets it to {REFERENCE_ONLY_BETA}); leave beta=0.0",
        )
    if args.beta != 0.0 and kl is None and not ref_only:
        refuse(
            "beta",
            f"TRL adds its KL penalty inside its own loss, which the method's loss replaces; the same k3 penalty is "
            f"entflow's 'kl_ref': write entflow_method='{m}+kl_ref' with "
            f"entflow_method_params={{'kl_ref.beta': {args.beta}}} and leave beta=0.0",
        )
    if kl is not None:
        if args.beta != 0.0 and args.beta != kl.beta:
            refuse("beta", f"is {args.beta} but kl_ref.beta is {kl.beta}; set only kl_ref.beta")
        if kl.beta == 0.0:
            raise ConfigError("entflow_method_params", "kl_ref with beta = 0 adds nothing; drop kl_ref")
        if args.use_bias_correction_kl:
            refuse(
                "use_bias_correction_kl",
                "entflow's kl_ref is GRPO's k3 without the importance ratio (docs/design.md §6); "
                "set use_bias_correction_kl=False",
            )
    bounds = method.clip_bounds()
    eps_high = args.epsilon if args.epsilon_high is None else args.epsilon_high
    if bounds is not None and (args.epsilon != CLIP_EPS or eps_high != args.epsilon):  # TRL's default ε is ours
        key = "epsilon" if args.epsilon != CLIP_EPS else "epsilon_high"
        refuse(
            key,
            f"the method sets the clip bounds (ε_low, ε_high) = {bounds}, so epsilon={args.epsilon}, "
            f"epsilon_high={args.epsilon_high} would be ignored; leave them at the default or drop the clip setter",
        )
    ga = args.gradient_accumulation_steps
    if needs.strict_on_policy and args.steps_per_generation * args.num_iterations != ga:
        key = "num_iterations" if args.num_iterations != 1 else "steps_per_generation"
        refuse(
            key,
            "the method is strictly on-policy (one gradient step per rollout batch, r ≡ 1; docs/design.md §6), so "
            f"steps_per_generation × num_iterations = {args.steps_per_generation * args.num_iterations} must equal "
            f"gradient_accumulation_steps = {ga}",
        )
    if args.delta is not None:
        clip_high = bounds[1] if bounds is not None else eps_high
        if not args.delta > 1 + clip_high:
            refuse(
                "delta",
                f"TRL's two-sided clip delta={args.delta} is entflow's dual clip only when delta > 1 + ε_high "
                f"= {1 + clip_high}",
            )
