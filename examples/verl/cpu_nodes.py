"""``run_cpu.sh`` with ``NODES=2``: a Ray cluster of two nodes on this machine, and where verl ran.

``python cpu_nodes.py plan`` prints shell assignments for run_cpu.sh: this machine's address as Ray
sees it (``NODE_IP``), a new token for Ray's token authentication (``TOKEN``: the cluster's own,
not the one in ``~/.ray``) and free ports for the head's GCS, dashboard and client server and for
each node's dashboard agent (two raylets on one host must not share the agent's default port).

``python cpu_nodes.py wait ADDRESS N SECONDS`` waits until the cluster at ADDRESS has N live nodes
(exit 1, naming what it saw, if not within SECONDS).

``python cpu_nodes.py placement ADDRESS OUT`` reads the cluster's node table (``ray.nodes()``) and
actor table (the GCS's, through ``ray._private.state.actors``: Ray's state API needs the dashboard,
which run_cpu.sh does not start) after the run, writes ``OUT/ray-nodes.json`` (every node: role,
id, alive, resources; every actor: class, name, node, state, pid) and prints one line per actor
kind that verl placed on specific nodes: its actor workers (``WorkerDict``) and the rollout servers.
Roles: ``head`` is the node holding Ray's head resource, ``worker`` the other.
"""

from __future__ import annotations

import json
import secrets
import socket
import sys
import time
from collections import Counter
from pathlib import Path

HEAD = "node:__internal_head__"
SLOT = "entflow_cpu_slot"  # entflow.integrations.verl.cpu.SLOT: one per actor worker a node hosts
KINDS = {"WorkerDict": "actor workers (verl's WorkerDict)", "CPURolloutServer": "rollout servers (entflow_cpu)"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def plan() -> None:
    import ray

    print(f"NODE_IP={ray.util.get_node_ip_address()}")
    print(f"GCS_PORT={free_port()}")
    print(f"TOKEN={secrets.token_hex(32)}")
    print(f"DASHBOARD_PORT={free_port()}")
    print(f"CLIENT_PORT={free_port()}")
    print(f"HEAD_AGENT_PORT={free_port()}")
    print(f"WORKER_AGENT_PORT={free_port()}")


def _connect(address: str) -> None:
    import logging

    import ray

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)


def wait(address: str, n: str, seconds: str) -> None:
    import ray

    deadline = time.time() + float(seconds)
    while True:  # the head's GCS may not answer yet
        try:
            _connect(address)
            break
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(2)
    alive = 0
    while time.time() < deadline:
        alive = sum(node["Alive"] for node in ray.nodes())
        if alive >= int(n):
            return
        time.sleep(1)
    print(
        f"run_cpu.sh: the Ray cluster at {address} has {alive} live node(s) after {seconds} s, not {n}", file=sys.stderr
    )
    raise SystemExit(1)


def role(node: dict) -> str:
    return "head" if HEAD in node.get("Resources", {}) else "worker"


def placement(address: str, out: str) -> None:
    import ray
    from ray._private import state

    _connect(address)
    nodes = ray.nodes()
    roles = {n["NodeID"]: role(n) for n in nodes}
    keep = ("CPU", "GPU", SLOT)
    record = {
        "address": address,
        "nodes": [
            {
                "role": roles[n["NodeID"]],
                "node_id": n["NodeID"],
                "alive": n["Alive"],
                "resources": {k: v for k, v in n.get("Resources", {}).items() if k in keep},
            }
            for n in nodes
        ],
        "actors": [
            {
                "class": a["ActorClassName"],
                "name": a["Name"],
                "node": roles.get(a["Address"]["NodeID"], "?"),
                "node_id": a["Address"]["NodeID"],
                "state": a["State"],
                "pid": a["Pid"],
            }
            for a in state.actors().values()
        ],
    }
    by_kind = {}
    for kind, label in KINDS.items():
        placed = Counter(a["node"] for a in record["actors"] if a["class"].rsplit(".", 1)[-1] == kind)
        by_kind[kind] = dict(sorted(placed.items()))
        print(f"run_cpu.sh: {label} by node: " + (", ".join(f"{r} {c}" for r, c in sorted(placed.items())) or "none"))
    record["by_node"] = by_kind
    Path(out, "ray-nodes.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"plan": plan, "wait": wait, "placement": placement}[cmd](*args)
