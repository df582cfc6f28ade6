"""The evidence: the papers' claims as a pre-registered registry (``claims.yaml``, ``claims``) with
their verdict rules, the sequential decisions (``decision``), the facts a run directory yields
(``facts``), the per-run facts records (``records``), ``entflow reproduce`` (``reproduce``), the
verifier of published verdicts (``verify``) and the clean estimator audit (``audit``). It sits above
the settings (``entflow.settings``), which train a claim's runs in the lab or on a real model, and
may import them and what they import; none of them imports it (docs/architecture.md §1)."""
