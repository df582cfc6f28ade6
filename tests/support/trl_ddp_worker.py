"""One rank of a 2-process CPU (gloo) EntflowGRPOTrainer run, for tests/integrations/test_trl.py.

    python -m torch.distributed.run --nproc_per_node 2 tests/support/trl_ddp_worker.py \
        MODEL_DIR OUT_DIR METHOD PARAMS_JSON

Trains one optimizer step (gradient accumulation 2, global statistics) and writes
``OUT_DIR/rank{r}.pt``: every micro-batch the loss saw (in order) and the final weights.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from datasets import Dataset
from trl_capture import trl_args  # tests/support/, this script's folder
from trl_tiny import continuous_reward

from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer

KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")


class Recording(EntflowGRPOTrainer):
    def _compute_loss(self, model, inputs):
        self.seen.append({k: inputs[k].detach().cpu().clone() for k in KEYS})
        return super()._compute_loss(model, inputs)


def main() -> None:
    model_dir, out_dir, method, params = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    data = Dataset.from_dict({"prompt": [f"{i} {i + 2}>{3 * i + 1}:" for i in range(8)]})
    args = EntflowGRPOConfig(
        **trl_args(
            os.path.join(out_dir, "trainer"),
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            logging_steps=10,  # TRL's default: no log line within the one step
            entflow_method=method,
            entflow_method_params=params,
        )
    )
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    trainer = Recording(
        model=model_dir, reward_funcs=continuous_reward, args=args, train_dataset=data, processing_class=tok
    )
    trainer.seen = []
    trainer.train()
    rank = trainer.accelerator.process_index
    weights = {
        k: v.detach().cpu().clone() for k, v in trainer.accelerator.unwrap_model(trainer.model).state_dict().items()
    }
    torch.save(
        {
            "seen": trainer.seen,
            "weights": weights,
            "world": trainer.accelerator.num_processes,
            "log": trainer.state.log_history,
        },
        os.path.join(out_dir, f"rank{rank}.pt"),
    )
    # Tear gloo down before the interpreter exits: left alive, its threads can abort a rank at exit
    # ("terminate called without an active exception"), failing a run whose results were written.
    trainer.accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
