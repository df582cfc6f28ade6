"""A fork server for the kill-and-resume tests (``support.kill_resume.TrainServer``): it imports
the libraries an ``entflow train`` process spends its first seconds on (torch, transformers,
scipy, TensorBoard: ~5 s of CPU of a tiny run's ~6), then, for each request read from stdin — one
JSON line ``{"argv": [...], "env": {...}, "log": path}`` — forks a child that sets ``env``, sends
its stdout and stderr to ``log`` and runs ``entflow.cli.main.main(argv)``, which is what
``entflow ARGV`` runs; it answers ``{"returncode": ...}`` (-9: the child SIGKILLed itself).

entflow itself is imported in each child, after its environment is set: the trainer's test hook
(``entflow.trainer.faults``) reads ``ENTFLOW_TEST_KILL_AT`` when it is imported. No library has
run a parallel kernel before the fork, so each child starts its own thread pools.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import scipy.stats  # noqa: F401
import torch
import torch.utils.tensorboard  # noqa: F401
import transformers.generation.utils
import transformers.modeling_utils
import transformers.models.llama.modeling_llama  # noqa: F401

assert not any(name == "entflow" or name.startswith("entflow.") for name in sys.modules)


def _child(request: dict) -> int:
    os.environ.pop("ENTFLOW_TEST_KILL_AT", None)
    os.environ.update(request["env"])
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.argv = ["entflow", *request["argv"]]
    from entflow.cli.main import main

    return main(request["argv"])


def serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve()
