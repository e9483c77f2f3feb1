"""The attention-cost measurements: the memory tracker against allocations of known size, and the trend."""

import torch

from aiayn.analysis.complexity import attention_costs, peak_memory


def test_peak_memory_counts_live_tensors_and_frees_them():
    def two_then_one():
        a = torch.ones(1000)  # 4,000 bytes
        b = torch.ones(500, dtype=torch.float64)  # 4,000 bytes, both alive: 8,000
        del a, b
        c = torch.ones(100)  # 400 bytes after both are gone
        return c.view(10, 10)  # a view: no new storage

    out, peak = peak_memory(two_then_one)
    assert out.shape == (10, 10) and peak == 8000


def test_window_attention_is_linear_and_global_quadratic_in_memory():
    rows = attention_costs(sides=(7, 14, 28), channels=16, heads=2, window=7, repeats=1)
    assert [r["tokens"] for r in rows] == [49, 196, 784]
    small, big = rows[0], rows[-1]
    # At 7 x 7 the map is one window: the same computation.
    assert small["global_macs"] == small["window_macs"] and small["global_score_bytes"] == small["window_score_bytes"]
    # 16 times the patches: window cost x 16, global scores x 256.
    assert big["window_score_bytes"] == 16 * small["window_score_bytes"]
    assert big["global_score_bytes"] == 256 * small["global_score_bytes"]
    # Measured: global attention holds at least its score matrix; windows hold far less.
    assert big["global_bytes"] >= big["global_score_bytes"] > 4 * big["window_bytes"]
    assert all(r[k] > 0 for r in rows for k in ("global_seconds", "window_seconds"))
