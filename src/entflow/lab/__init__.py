"""The lab: tiny tasks, a tiny policy, a warm start and a GRPO trainer on one CPU (docs/design.md §10)."""
