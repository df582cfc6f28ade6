"""Faulty subjects for the doctor's fault-injection tests that must cross a process boundary
(the distributed check's ranks are fresh processes, so the fault is a module-level function), and
what the numeric checks' results must say on a CPU."""

from __future__ import annotations


def prepare_with_local_all_reduce(micro_batches, method, group=None):
    """``prepare_statistics`` whose sums / maxima / minima skip the collective: each rank keeps
    its own partial value (a broken all_reduce), while the all_gathers still work."""
    from entflow.core.distributed import Reducer
    from entflow.methods.objective import prepare_statistics

    original = Reducer._all_reduce
    Reducer._all_reduce = lambda self, x, op: x
    try:
        return prepare_statistics(micro_batches, method, group=group)
    finally:
        Reducer._all_reduce = original


def check_token_stats_with_wrong_entropy(device, quick=False):
    """The doctor's token_stats check run on a ``token_stats`` whose entropy is 0.1 % high."""
    import entflow as ef
    from entflow.doctor.token_stats import check_token_stats

    def wrong(*args, **kwargs):
        st = ef.token_stats(*args, **kwargs)
        return st._replace(entropy=st.entropy * 1.001)

    return check_token_stats(device, quick, fn=wrong)


def passed_on_cpu(results: list, family: str, forward_tol: float) -> list:
    """The checks of ``family`` that ran on the CPU: every one passed, with a forward error in
    (0, ``forward_tol``); its two Triton variants (float32, bf16) skipped, saying why (no CUDA device,
    or no triton)."""
    ran = [r for r in results if r.status != "SKIP"]
    assert all(r.ok for r in ran), [r.detail for r in ran]
    assert all(0 < r.measurements["forward_error"] < forward_tol for r in ran)
    skipped = [r for r in results if r.status == "SKIP"]
    assert {r.name for r in skipped} == {f"{family}[cpu,float32,triton]", f"{family}[cpu,bfloat16,triton]"}
    assert all("CUDA" in r.skipped_reason or "triton not installed" in r.skipped_reason for r in skipped)
    return ran
