"""The sync-free order statistics (core/selection.py) against torch's own data-dependent ops."""

from __future__ import annotations

import math

import pytest
import torch

from entflow.core.selection import count_floor, dense_ids, scoped_extreme, scoped_quantile, smallest_mask


@pytest.mark.parametrize("m", [1, 7, 200])
def test_smallest_mask_is_the_stable_sort_prefix_with_ties(gen, m):
    keys = torch.randint(0, 5, (m,), generator=gen).to(torch.float64)  # many ties
    for n in range(1, m + 1):
        ref = torch.zeros(m, dtype=torch.bool)
        ref[torch.sort(keys, stable=True).indices[:n]] = True  # stable: earlier entry first among ties
        for n_max in (n, m, m + 3):
            assert torch.equal(smallest_mask(keys, torch.tensor(n), n_max), ref), (n, n_max)


def test_dense_ids_match_unique_inverse(gen):
    ids = torch.randint(-5, 50, (40,), generator=gen) * 3
    torch.testing.assert_close(dense_ids(ids), torch.unique(ids, return_inverse=True)[1], rtol=0, atol=0)
    assert dense_ids(torch.zeros(0, dtype=torch.long)).numel() == 0


@pytest.mark.parametrize("q", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_scoped_quantile_and_extremes_match_torch_per_scope(gen, q):
    m = 60
    values = torch.randn(m, generator=gen, dtype=torch.float64)
    valid = torch.rand(m, generator=gen) < 0.7
    scope = torch.randint(0, 4, (m,), generator=gen)
    scope[scope == 3] = 2  # leave id 3 empty, and make one scope without a valid entry
    valid[scope == 1] = False
    out_q = scoped_quantile(values, valid, q, scope)
    out_hi = scoped_extreme(values, valid, scope, largest=True)
    out_lo = scoped_extreme(values, valid, scope, largest=False)
    for s in scope.unique().tolist():
        rows, vals = scope == s, values[(scope == s) & valid]
        expect = torch.quantile(vals, q) if vals.numel() else torch.tensor(0.0, dtype=torch.float64)
        torch.testing.assert_close(out_q[rows], expect.expand(int(rows.sum())), rtol=1e-12, atol=1e-12)
        hi = vals.max() if vals.numel() else torch.tensor(0.0, dtype=torch.float64)
        lo = vals.min() if vals.numel() else torch.tensor(0.0, dtype=torch.float64)
        assert torch.equal(out_hi[rows], hi.expand(int(rows.sum())))
        assert torch.equal(out_lo[rows], lo.expand(int(rows.sum())))
    torch.testing.assert_close(scoped_quantile(values, valid, q)[0], torch.quantile(values[valid], q))


def test_count_floor_is_max_floor_one():
    for ratio, n in [(2e-4, 100), (0.1, 55), (1.0, 7), (0.0, 9), (0.3, 10)]:
        assert int(count_floor(ratio, torch.tensor(n))) == max(math.floor(ratio * n), 1)


@pytest.mark.parametrize("n_valid", [0, 1, 2, 5])
def test_quantile_with_few_valid_entries(gen, n_valid):
    values = torch.randn(9, generator=gen, dtype=torch.float64)
    valid = torch.zeros(9, dtype=torch.bool)
    valid[torch.randperm(9, generator=gen)[:n_valid]] = True
    for q in (0.0, 0.3, 0.8, 1.0):
        out = scoped_quantile(values, valid, q)
        expect = torch.quantile(values[valid], q) if n_valid else torch.tensor(0.0, dtype=torch.float64)
        torch.testing.assert_close(out, expect.expand(9), rtol=1e-12, atol=1e-12)
