"""The names of the entropy-change estimators of docs/design.md §5, without importing torch (the
analysis of run directories reads them to order a run's ``audit/<estimator>/*`` metrics)."""

ESTIMATORS = ("steer", "sampled_logit", "opefo", "tabular", "cov")
