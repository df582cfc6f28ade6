"""The methods of docs/design.md §6 and their documented defaults (checked by tests/methods/test_params.py)."""

DESIGN_DEFAULTS = {
    "grpo": {},
    "clip_higher": {"clip_low": 0.2, "clip_high": 0.28},
    "clip_lower": {"clip_low": 0.28, "clip_high": 0.2},
    "clip_tighter": {"clip_low": 0.12, "clip_high": 0.2},
    "clip_free": {},
    "clip_extreme": {"clip_low": 0.99, "clip_high": 5.0},
    "entropy_bonus": {"c": 0.001},
    "adaptive_entropy": {"target": 0.2, "delta": 1e-4, "c_min": 0.0, "c_max": 0.005, "c0": 0.0},
    "kl_ref": {"beta": 0.001},
    "clip_cov": {"ratio": 2e-4, "cov_low": 1.0, "cov_high": 5.0},
    "kl_cov": {"ratio": 2e-3, "beta": 1.0, "keep_ppo_clip": False},
    "steer": {"lambda_min": 0.8, "floor": 0.02, "mapping": "exp", "lambda_max": 1.2, "estimator": "steer"},
    "opefo": {"variant": "adaptive", "lam": 0.001, "estimator": "opefo"},
    "opefo_target": {"target": None, "k": 1.0, "f_max": 0.5, "lam_max": 0.95},
    "pos_adv_reweight": {"schedule": "entropy", "weight": 1.0, "target": 0.2, "delta": 0.05, "init": 1.0},
    "positive_only": {},
    "negative_only": {},
    "rand_pos_clip": {"ratio": 2e-4},
    "w_reinforce": {"lam": 0.1, "threshold": 0.5},
    "unlikeliness": {"beta": 0.25},
    "entropy_advantage": {"alpha": 0.4, "kappa": 2.0},
    "gtpo": {"alpha": 0.1},
    "edge_grpo": {},
    "forking_tokens": {"rho": 0.2},
    "ppl_shaping": {"alpha": 0.01},
    "position_shaping": {"gamma": 0.1, "m": 15.0, "c": 0.5, "d": 1, "start": None, "duration": None},
    "quadrant": {"preset": None, "I": None, "II": None, "III": None, "IV": None, "hi": 0.8, "lo": 0.2},
}
DESIGN_NAMES = sorted(DESIGN_DEFAULTS)

# what a method without a default for a parameter needs to be built at all
REQUIRED_PARAMS = {
    "opefo_target": {"target": 0.5},
    "dro": {"dro_beta": 0.1},
    "off_policy_mask": {"threshold": 0.5},
}
# what every registered method is built with by the tests that build them all: the required
# parameters, and quadrant with a preset (without one it sets no action)
BUILD = {**REQUIRED_PARAMS, "quadrant": {"preset": "uplift"}}
