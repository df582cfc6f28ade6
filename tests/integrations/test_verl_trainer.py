"""The ``entflow`` trainer mode's hooks, run against stand-ins for verl's base trainer and
TransferQueue.

verl's v1 trainer cannot be imported here (it needs transfer_queue, an HTTP server, vLLM); this
test replaces exactly three modules — ``transfer_queue`` (a dict-backed store of jagged tensors,
as verl keeps its batch), ``verl.trainer.ppo.v1.trainer_base`` (``register_trainer``) and
``verl.trainer.ppo.v1.trainer_sync`` (a ``PPOTrainerSync`` whose hooks do what verl's do to the
batch and metrics) — and imports entflow's real trainer module on top. Everything else is real:
verl's Hydra config with the example's overrides, its config dataclasses, ``response_to_nested``,
the installed loss function, entflow's methods. Checks each hook against an independent
computation (``ef.policy_loss``, ``ef.compute_advantages``, the controller rule of docs/design.md §7).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from functools import partial
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")
pytestmark = pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")

from tensordict import NonTensorStack, TensorDict  # noqa: E402

import entflow as ef  # noqa: E402
from entflow.integrations.verl.check import compose  # noqa: E402
from entflow.integrations.verl.driver import CHECKPOINT_FILE  # noqa: E402
from entflow.integrations.verl.losses import entflow_ppo_loss  # noqa: E402
from entflow.integrations.verl.spec import WORKER_METHODS  # noqa: E402
from support.verl_util import random_token_tensors, verl_micro_batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
METHOD = "entropy_advantage+steer+adaptive_entropy"
N, T = 8, 6


def overrides(tmp_path) -> list[str]:
    env = {"ENTFLOW_PRINT_OVERRIDES": "1", "METHOD": METHOD, "METHOD_PARAMS": "target=0.9", "CALCULATE_ENTROPY": "True"}
    out = subprocess.run(
        ["bash", str(ROOT / "examples" / "verl" / "run_grpo_1node.sh")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return [*out.stdout.split(), f"trainer.default_local_dir={tmp_path}"]


def jagged(rows) -> torch.Tensor:
    return torch.nested.as_nested_tensor([torch.as_tensor(r, dtype=torch.float32) for r in rows], layout=torch.jagged)


class Store:
    """TransferQueue stand-in: one partition of samples, fields kept as jagged tensors."""

    def __init__(self, td: TensorDict):
        self.td = td

    def kv_batch_get(self, keys, partition_id, select_fields):
        return self.td.select(*[f for f in select_fields if f in self.td.keys()])

    def kv_batch_put(self, keys, partition_id, fields):
        self.td.update(fields)
        return Batch(keys)


class Batch:
    """KVBatchMeta stand-in."""

    def __init__(self, keys):
        self.keys, self.partition_id, self.extra_info = list(keys), "train", {}

    def __len__(self):
        return len(self.keys)


class WorkerGroup:
    def set_loss_fn(self, loss_fn):
        self.loss_fn = loss_fn


@pytest.fixture
def trainer_module(monkeypatch):
    """entflow's trainer module imported over stand-ins of verl's v1 base trainer and TransferQueue."""
    registry = {}

    def register_trainer(name):
        def deco(cls):
            registry[name] = cls
            return cls

        return deco

    class PPOTrainerSync:  # the part of verl's trainer the hooks rely on
        def __init__(self, config):
            self.config = config
            self.trainer_mode = config.trainer.v1.trainer_mode
            self.global_steps, self.total_training_steps = 0, 20
            self.actor_rollout_wg = WorkerGroup()
            self.saved, self.resume_step = False, 0

        def on_init_end(self):
            self.weights_synced = True

        def _compute_advantage(self, batch, metrics):
            return batch  # verl's estimator already wrote "advantages" into the store

        def _update_actor(self, batch, metrics):
            self.sent = dict(batch.extra_info)
            metrics.update({"actor/entflow/steer/weight_mean": 0.9, "actor/pg_loss": 0.1})  # rename_dict's output
            return batch

        def _save_checkpoint(self):
            self.saved = True

        def _load_checkpoint(self):
            self.global_steps = self.resume_step

    store = Store(TensorDict({}, batch_size=N))
    tq = types.ModuleType("transfer_queue")
    tq.kv_batch_get, tq.kv_batch_put = store.kv_batch_get, store.kv_batch_put
    v1 = types.ModuleType("verl.trainer.ppo.v1")
    v1.__path__ = []
    base = types.ModuleType("verl.trainer.ppo.v1.trainer_base")
    base.register_trainer = register_trainer
    sync = types.ModuleType("verl.trainer.ppo.v1.trainer_sync")
    sync.PPOTrainerSync = PPOTrainerSync
    for name, mod in [
        ("transfer_queue", tq),
        ("verl.trainer.ppo.v1", v1),
        ("verl.trainer.ppo.v1.trainer_base", base),
        ("verl.trainer.ppo.v1.trainer_sync", sync),
    ]:
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "entflow.integrations.verl.trainer", raising=False)
    module = importlib.import_module("entflow.integrations.verl.trainer")
    yield module, registry, store
    sys.modules.pop("entflow.integrations.verl.trainer", None)


def test_entflow_trainer_hooks(trainer_module, tmp_path):
    module, registry, store = trainer_module
    assert registry["entflow"] is module.EntflowTrainer
    config = compose(overrides(tmp_path))
    trainer = module.EntflowTrainer(config)
    assert trainer.trainer_mode == "sync"  # verl's sync-only branches apply

    # on_init_end: the installed loss is entflow's, with verl's actor config
    trainer.on_init_end()
    loss_fn = trainer.actor_rollout_wg.loss_fn
    assert isinstance(loss_fn, partial) and loss_fn.func is entflow_ppo_loss and trainer.weights_synced
    t = random_token_tensors(N, T, torch.Generator().manual_seed(3))
    old, mask = t["old"], t["mask"]
    data, flat = verl_micro_batch(t)
    WORKER_METHODS.clear()
    loss, _ = loss_fn(model_output={"log_probs": flat(t["logp"]), "entropy": flat(t["H"])}, data=data)
    ref = ef.policy_loss(
        ef.TokenBatch(t["logp"], old, t["adv"], mask, entropy=t["H"], old_entropy=t["old_H"]),
        ef.get_method(METHOD, target=0.9), ef.LossSpec(0.2, 0.2, 3.0),
    )  # fmt: skip
    assert abs(float(loss) - float(ref.loss)) <= 1e-6

    # _compute_advantage: the method's shapers on verl's advantages, written back as jagged tensors
    lengths = mask.sum(-1).tolist()
    uid = [f"p{i // 4}" for i in range(N)]
    store.td = TensorDict(
        {
            "response_mask": jagged([[1] * n for n in lengths]),
            "advantages": jagged([t["adv"][i, :n].tolist() for i, n in enumerate(lengths)]),
            "old_log_probs": jagged([old[i, :n].tolist() for i, n in enumerate(lengths)]),
            "entropy": jagged([t["old_H"][i, :n].tolist() for i, n in enumerate(lengths)]),
            "rm_scores": jagged([[0.0] * n for n in lengths]),
            "uid": NonTensorStack(*uid),
        },
        batch_size=N,
    )
    trainer.global_steps = 4
    metrics = {}
    trainer._compute_advantage(Batch(range(N)), metrics)
    shaped = store.td["advantages"].to_padded_tensor(0.0)
    expected = ef.compute_advantages(
        ef.TokenBatch(old, old, t["adv"], mask, old_entropy=t["old_H"]), ef.get_method("entropy_advantage")
    )
    assert float((shaped - expected[:, : shaped.shape[1]]).abs().max()) <= 1e-6
    assert not torch.equal(shaped, t["adv"][:, : shaped.shape[1]])  # shaping changed something
    bonus = (expected - t["adv"]).masked_fill(~mask, 0).sum() / mask.sum()
    assert metrics["entflow/entropy_advantage/bonus_mean"] == pytest.approx(float(bonus), abs=1e-6)

    # _update_actor: step and controller state travel with the batch; one controller step per call
    batch = Batch(range(N))
    metrics = {"actor/entropy": 0.5}  # below target 0.9: adaptive_entropy raises its coefficient
    trainer._update_actor(batch, metrics)
    assert trainer.sent["entflow_step"] == 3 and trainer.sent["entflow_total_steps"] == 20
    assert trainer.sent["entflow_state"] == {"adaptive_entropy": {"coef": 0.0, "active": True}}  # c0, initial
    assert metrics["entflow/steer/weight_mean"] == 0.9 and "actor/entflow/steer/weight_mean" not in metrics
    controller = trainer.entflow.method.parts[2]
    assert controller.coef == pytest.approx(1e-4) and controller.active  # c + δ (docs/design.md §7)

    # checkpoint: written next to verl's, restored on resume
    trainer._save_checkpoint()
    assert trainer.saved and (tmp_path / "global_step_4" / CHECKPOINT_FILE).exists()
    resumed = module.EntflowTrainer(compose(overrides(tmp_path)))
    resumed.resume_step = 4
    resumed._load_checkpoint()
    assert resumed.entflow.method.parts[2].coef == pytest.approx(1e-4)
    assert resumed.entflow.method.state_dict() == trainer.entflow.method.state_dict()


def _with_extra(self, batch, metrics, step, *, timing=None):  # an extra positional and keyword
    return batch


def _without_metrics(self, batch):
    return batch


REFUSED_CALL = "does not take the arguments entflow's adapter passes (batch, metrics)"


@pytest.mark.parametrize(
    ("hook", "changed", "why"),
    [
        ("_update_actor", _with_extra, REFUSED_CALL),
        ("_compute_advantage", _without_metrics, REFUSED_CALL),
        ("_save_checkpoint", lambda self, *, keep=2: None, "has parameters entflow's override"),
    ],
    ids=["extra_positional_and_keyword", "fewer", "new_keyword"],
)
def test_a_verl_whose_hooks_changed_is_refused_when_the_trainer_is_built(trainer_module, tmp_path, hook, changed, why):
    """EntflowTrainer checks each PPOTrainerSync hook it overrides when built (before any worker
    starts): a changed signature is refused naming the hook and verl's version, not met as a
    TypeError at the first step or checkpoint."""
    from entflow.errors import UnsupportedVersionError
    from entflow.integrations.hooks import library_version

    module, _, _ = trainer_module
    base = module.EntflowTrainer.__mro__[1]
    config = compose(overrides(tmp_path))
    module.EntflowTrainer(config)  # verl's own signatures pass
    original = vars(base)[hook]
    setattr(base, hook, changed)
    try:
        with pytest.raises(UnsupportedVersionError) as e:
            module.EntflowTrainer(compose(overrides(tmp_path)))
    finally:
        setattr(base, hook, original)
    msg = str(e.value)
    assert msg.startswith(f"verl {library_version('verl')}: PPOTrainerSync.{hook}(") and why in msg, msg
    assert msg.endswith("entflow is tested with verl 0.9.0 and 0.9.1"), msg
