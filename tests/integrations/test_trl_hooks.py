"""The TRL adapter's construction-time check of the GRPOTrainer internals it overrides, calls and
reads (``integrations/trl/compat.py``: ``TRL_HOOKS``, ``TRL_ATTRIBUTES``): the installed TRL passes;
a TRL whose hook gained a positional and a keyword parameter, lost a hook, renamed a parameter the
adapter passes, or lacks an attribute is refused when the trainer is built, with a typed error naming
the hook and the TRL version, never a TypeError in the middle of training."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

from trl import GRPOTrainer

from entflow.errors import UnsupportedVersionError
from entflow.integrations.hooks import library_version
from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
from entflow.integrations.trl.compat import TRL_ATTRIBUTES, check_trl_attributes, check_trl_hooks
from support.trl_capture import trl_args
from support.trl_tiny import save_tiny_llama

TRL = library_version("trl")


def build(out, model="no-such-model"):
    """An EntflowGRPOTrainer; the model path is only read after the hook check."""
    return EntflowGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                              args=EntflowGRPOConfig(**trl_args(out)))  # fmt: skip


def test_the_installed_trl_passes_and_a_built_trainer_has_every_attribute(tmp_path):
    check_trl_hooks(EntflowGRPOTrainer, EntflowGRPOTrainer)
    path, tok, data = save_tiny_llama(tmp_path / "m")
    trainer = EntflowGRPOTrainer(
        model=path, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=EntflowGRPOConfig(**trl_args(tmp_path / "out")), train_dataset=data, processing_class=tok,
    )  # fmt: skip
    assert all(hasattr(trainer, a) for a in TRL_ATTRIBUTES)


def _required(self, inputs, prompts, completions, completion_ids_list, environments, *, strict=False):
    raise AssertionError("never called")


def _optional(self, inputs, prompts, completions, completion_ids_list, environments=None, *, strict=False):
    raise AssertionError("never called")


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        (_required, "does not take the arguments entflow's adapter passes (inputs, prompts, completions"),
        (_optional, "has parameters entflow's override EntflowGRPOTrainer._calculate_rewards(inputs, prompts"),
    ],
    ids=["required", "optional"],
)
def test_a_hook_with_an_extra_positional_and_keyword_is_refused_at_construction(tmp_path, monkeypatch, changed, why):
    """A TRL whose ``_calculate_rewards`` takes one more positional and a keyword: the adapter's call
    (required) or TRL's call of the override (optional, which TRL would pass) would raise a TypeError at the
    first generation; the check refuses it when the trainer is built, before the model is loaded."""
    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", changed)
    with pytest.raises(UnsupportedVersionError) as e:
        build(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"trl {TRL}: GRPOTrainer._calculate_rewards(") and "environments" in msg, msg
    assert why in msg and msg.endswith("entflow is tested with trl 1.8 … 1.16"), msg
    assert (e.value.library, e.value.version) == ("trl", TRL)


def test_a_fake_grpo_trainer_subclass_is_checked_where_super_leads(tmp_path):
    """The check reads the implementation that the adapter's ``super()`` reaches, here a subclass of
    GRPOTrainer between the adapter and TRL's class."""

    class Changed(GRPOTrainer):
        def _compute_loss(self, model, inputs, num_items_in_batch, *, scale=1.0):
            raise AssertionError("never called")

    class Adapted(EntflowGRPOTrainer, Changed):
        pass

    check_trl_hooks(EntflowGRPOTrainer, EntflowGRPOTrainer)  # TRL's own class passes
    with pytest.raises(UnsupportedVersionError, match=r"GRPOTrainer\._compute_loss\(.*num_items_in_batch"):
        check_trl_hooks(Adapted, EntflowGRPOTrainer)
    with pytest.raises(UnsupportedVersionError, match="_compute_loss"):
        Adapted(model="no-such-model", args=EntflowGRPOConfig(**trl_args(tmp_path)))


def test_a_missing_hook_and_a_renamed_parameter_are_refused(tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        m.delattr(GRPOTrainer, "_generate_and_score_completions")
        with pytest.raises(UnsupportedVersionError, match=r"_generate_and_score_completions does not exist"):
            build(tmp_path)

    def renamed(self, entropies, mask, quantile):  # the adapter passes `threshold` third, by position
        raise AssertionError("never called")

    with monkeypatch.context() as m:
        m.setattr(GRPOTrainer, "get_high_entropy_mask", renamed)
        with pytest.raises(UnsupportedVersionError, match=r"get_high_entropy_mask\(entropies, mask, quantile\)"):
            build(tmp_path)

    def off_policy(advantages, per_token_logps, sampling_logps, mask, off_policy_threshold):
        raise AssertionError("never called")

    with monkeypatch.context() as m:
        m.setattr(GRPOTrainer, "get_off_policy_mask", staticmethod(off_policy))
        with pytest.raises(UnsupportedVersionError, match="sampling_per_token_logps=…"):
            build(tmp_path)


def test_a_new_optional_keyword_of_a_hook_with_kwargs_is_accepted(monkeypatch):
    """The override of ``_get_per_token_logps_and_entropies`` forwards ``**kwargs``: TRL adding a
    multimodal input (as each release does) is no reason to refuse it."""
    original = GRPOTrainer._get_per_token_logps_and_entropies

    def more(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
             compute_aux_loss=False, *, audio_values=None, **rest):  # fmt: skip
        return original(self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy)

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", more)
    check_trl_hooks(EntflowGRPOTrainer, EntflowGRPOTrainer)


def test_a_parameter_the_override_requires_and_trl_may_leave_out_is_refused(monkeypatch):
    """TRL's ``_save_checkpoint`` giving ``trial`` a default means TRL may call it without one, which
    the override (``model, trial``, both required) would refuse."""

    def optional_trial(self, model, trial=None):
        raise AssertionError("never called")

    monkeypatch.setattr(GRPOTrainer, "_save_checkpoint", optional_trial)
    with pytest.raises(UnsupportedVersionError, match=r"_save_checkpoint\(model, trial=None\) has parameters"):
        check_trl_hooks(EntflowGRPOTrainer, EntflowGRPOTrainer)


def test_a_hook_behind_a_decorator_that_hides_its_signature_is_not_refused(monkeypatch):
    """A TRL hook wrapped by a decorator without ``functools.wraps`` shows ``(*args, **kwargs)``: that
    says nothing about the parameters, so it is not a reason to refuse TRL."""
    original = GRPOTrainer._calculate_rewards

    def opaque(*args, **kwargs):
        return original(*args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", opaque)
    check_trl_hooks(EntflowGRPOTrainer, EntflowGRPOTrainer)


def test_a_trainer_missing_an_attribute_is_refused():
    present = SimpleNamespace(**{a: None for a in TRL_ATTRIBUTES})
    check_trl_attributes(present)
    del present._logs
    with pytest.raises(UnsupportedVersionError, match=rf"trl {TRL}: GRPOTrainer has no attribute _logs"):
        check_trl_attributes(present)
