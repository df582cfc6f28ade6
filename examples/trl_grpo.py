"""GRPO with an entflow method inside TRL's GRPOTrainer.

On CPU, in a few minutes: the lab's warm-started tiny countdown policy (built and cached by
``entflow pretrain`` on first use, about a minute) learns "reach the target with these numbers"
while STEER and Clip-Higher keep its entropy from collapsing::

    .venv/bin/python examples/trl_grpo.py                                   # clip_higher+steer, 30 steps
    .venv/bin/python examples/trl_grpo.py --method grpo                     # TRL's own GRPO, for comparison
    .venv/bin/python examples/trl_grpo.py --method adaptive_entropy --params '{"target": 0.4}'

Unchanged on a GPU with a real model and a reasoning-gym task (bf16, generation by
``transformers``; add ``--use-vllm`` where vLLM is installed)::

    python examples/trl_grpo.py --model Qwen/Qwen2.5-0.5B-Instruct --task reasoning_gym:basic_arithmetic \\
        --max-completion-length 256 --prompts-per-step 16 --group 8 --lr 1e-6 --steps 200

Everything entflow logs (``flow/*``, ``quadrant/*``, ``steer/*``, …) reaches TRL's log, so
``--report-to tensorboard`` (or ``wandb``) plots it; the script prints a short table at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable

from datasets import Dataset

from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer

# --------------------------------------------------------------------------------------------
# tasks as datasets.Dataset + reward functions with TRL's signature
# --------------------------------------------------------------------------------------------


def countdown_dataset(n: int, seed: int) -> tuple[Dataset, Callable]:
    """The lab's countdown task: prompt ``"3 5 7>15:"``, any expression reaching 15 is correct."""
    from entflow.lab.tasks import CountdownAnswer, Problem, get_task

    task = get_task("countdown")
    problems = task.sample_problems(n, random.Random(seed))
    data = Dataset.from_dict(
        {
            "prompt": [p.prompt for p in problems],
            "numbers": [list(p.answer.numbers) for p in problems],
            "target": [p.answer.target for p in problems],
        }
    )

    def countdown_reward(completions, numbers, target, **kwargs) -> list[float]:
        return [
            task.reward(Problem("", CountdownAnswer(tuple(nums), tgt)), text)
            for text, nums, tgt in zip(completions, numbers, target, strict=True)
        ]

    return data, countdown_reward


def reasoning_gym_dataset(name: str, n: int, seed: int) -> tuple[Dataset, Callable]:
    """A reasoning-gym task as chat prompts; the answer follows ``Answer:`` in the completion."""
    import reasoning_gym

    source = reasoning_gym.create_dataset(name, size=n, seed=seed)
    instruction = "\nThink briefly, then give the final answer on the last line as 'Answer: <answer>'."
    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": source[i]["question"] + instruction}] for i in range(n)],
            "index": list(range(n)),
        }
    )

    def reasoning_gym_reward(completions, index, **kwargs) -> list[float]:
        scores = []
        for completion, i in zip(completions, index, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            found = re.findall(r"Answer:\s*(.+)", text)
            scores.append(float(source.score_answer(found[-1].strip(), source[i])) if found else 0.0)
        return scores

    return data, reasoning_gym_reward


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="HF model path or id (default: the lab's warm-started policy)")
    ap.add_argument("--task", default="countdown", help="'countdown' or 'reasoning_gym:<dataset name>'")
    ap.add_argument("--method", default="clip_higher+steer", help="entflow method or composition")
    ap.add_argument("--params", default="{}", help="method parameters as JSON")
    ap.add_argument("--loss-type", default="dapo", choices=["dapo", "grpo", "dr_grpo", "bnpo"])
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps")
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--group", type=int, default=8, help="completions per prompt (num_generations)")
    ap.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps")
    ap.add_argument("--max-completion-length", type=int, default=None)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--use-vllm", action="store_true")
    ap.add_argument("--report-to", default="none")
    ap.add_argument("--output-dir", default="runs/trl_grpo")
    a = ap.parse_args(argv)

    import torch

    if a.task == "countdown":
        data, reward = countdown_dataset(4096, a.seed)
        max_len = a.max_completion_length or 9  # the longest countdown answer (3 numbers) plus <eos>
    elif a.task.startswith("reasoning_gym:"):
        data, reward = reasoning_gym_dataset(a.task.split(":", 1)[1], 4096, a.seed)
        max_len = a.max_completion_length or 256
    else:
        raise SystemExit(f"--task must be 'countdown' or 'reasoning_gym:<name>', got {a.task!r}")
    model = a.model
    if model is None:
        from entflow.lab.pretrain import PretrainConfig, pretrain

        model = str(pretrain(PretrainConfig()))  # cached after the first run
    on_gpu = torch.cuda.is_available()
    batch = a.prompts_per_step * a.group // a.grad_accum
    args = EntflowGRPOConfig(
        output_dir=a.output_dir,
        entflow_method=a.method,
        entflow_method_params=json.loads(a.params),
        loss_type=a.loss_type,
        num_generations=a.group,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=a.grad_accum,
        max_completion_length=max_len,
        temperature=1.0,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        max_steps=a.steps,
        logging_steps=1,
        save_strategy="no",
        seed=a.seed,
        bf16=on_gpu,  # float32 on CPU
        use_cpu=not on_gpu,
        use_vllm=a.use_vllm,
        report_to=a.report_to,
        disable_tqdm=False,
    )
    trainer = EntflowGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data)
    trainer.train()

    cols = ["reward", "entropy", "flow/lambda_star", "clip_ratio/high_mean"]
    cols += sorted({k for h in trainer.state.log_history for k in h if k.startswith(tuple(a.method.split("+")))})[:3]
    print("\n" + " ".join(f"{c:>22}" for c in ["step", *cols]))
    for h in trainer.state.log_history:
        if "reward" in h:
            print(" ".join(f"{h.get(c, float('nan')):>22.4g}" for c in ["step", *cols]))


if __name__ == "__main__":
    main()
