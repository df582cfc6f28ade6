"""The evidence: the papers' claims as a pre-registered registry (``claims.yaml``, ``claims``), the
facts a run directory yields (``facts``), ``entflow reproduce`` (``reproduce``), runs side by side
(``compare``), the clean estimator audit (``audit``) and the registry of setting kinds that trains a
setting's runs, the lab's tiny policy or a real model (``settings``). It sits above ``entflow.lab``
and ``entflow.hf`` and may import both; neither imports it (docs/architecture.md §1)."""
