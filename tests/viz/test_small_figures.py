"""The small figures: the 20 x 512 positional encodings, the 5 x 5 look-ahead mask, and Swin's windows, whose
counts and regions must be the model's own (figure 4: cyclic shift + mask == the 9 naive windows)."""

import pytest
import torch
from matplotlib import image

from aiayn.layers.masks import causal_mask
from aiayn.layers.vision import shifted_window_mask, window_index, window_partition
from aiayn.models.swin import SwinBlock
from aiayn.viz.masks import LOOKAHEAD_TOKENS, plot_lookahead
from aiayn.viz.positional import _ticks, plot_positional
from aiayn.viz.swin import plot_swin_windows, window_layout

PNG = b"\x89PNG\r\n\x1a\n"


def png(path, min_width=300):
    """A real PNG that matplotlib reads back, of a sensible size."""
    assert path.read_bytes()[:8] == PNG, path
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[1] >= min_width and pixels.shape[0] >= 200, pixels.shape
    return pixels


def test_positional_draws_the_tutorials_20_by_512(tmp_path):
    assert png(plot_positional(tmp_path / "pe.png"), min_width=1000).shape[1] > 1200  # defaults: 512 x 20
    png(plot_positional(tmp_path / "small.png", 32, 100))  # the old call still works
    assert _ticks(512)[0] == 0 and _ticks(512)[-1] == 511 and 256 in _ticks(512)  # the halves' border labelled
    assert _ticks(20) == list(range(20))
    with pytest.raises(ValueError, match="d_model"):
        plot_positional(tmp_path / "odd.png", 7, 20)
    with pytest.raises(ValueError, match="n_positions"):
        plot_positional(tmp_path / "one.png", 8, 1)


def test_lookahead_mask_figure(tmp_path):
    assert LOOKAHEAD_TOKENS == ("<Begin>", "I", "have", "a", "cat")
    png(plot_lookahead(tmp_path / "la.png"))
    png(plot_lookahead(tmp_path / "three.png", ["a", "b", "c"]), min_width=200)
    # what it draws: "have" (query 2) sees "<Begin>", "I", "have", not "a" or "cat"
    assert causal_mask(5)[2].tolist() == [True, True, True, False, False]
    with pytest.raises(ValueError, match="tokens"):
        plot_lookahead(tmp_path / "none.png", [])


def test_swin_window_counts_are_figure_2s():
    layout = window_layout(8, 4, 2)
    assert layout.counts == (4, 9, 4)
    assert sorted(layout.naive_sizes) == [4, 4, 4, 4, 8, 8, 8, 8, 16]
    assert sum(layout.naive_sizes) == 64
    # the toy map of the tutorials: 9 windows of 9 patches
    windows = window_partition(torch.arange(81).view(1, 9, 9, 1), 3)
    assert windows.shape[:2] == (9, 9)


def test_swin_regions_are_the_models_shift_mask():
    side, m, s = 8, 4, 2
    layout = window_layout(side, m, s)
    labels = window_partition(layout.regions[None, :, :, None], m)[..., 0]  # (nW, M*M)
    allowed = shifted_window_mask(side, side, m, s)  # (nW, M*M, M*M)
    assert torch.equal(labels[:, :, None] == labels[:, None, :], allowed)
    # ... and the additive mask the block adds to its scores is -inf exactly between different regions
    block = SwinBlock(8, 2, window=m, shift=s)
    mask = block.attention_mask(side, side, m, s, torch.zeros(1))  # (nW, heads, T, T)
    assert torch.equal(torch.isinf(mask), ~allowed[:, None].expand_as(mask))
    # the rolled map's windows are the patches the fast path gathers
    gathered = window_index(side, side, m, s).view(-1, m * m)  # (nW, M*M)
    rolled_windows = window_partition(layout.rolled[None, :, :, None], m)[..., 0]
    assert torch.equal(gathered, rolled_windows)


@pytest.mark.parametrize("side,m,s", [(8, 4, 2), (12, 4, 1), (9, 3, 1)])
def test_cyclic_shift_with_the_mask_computes_the_naive_windows(side, m, s):
    """Figure 4's point: two patches meet under the cyclic shift and its mask iff they share a naive window."""
    layout = window_layout(side, m, s)
    n = side * side
    cyclic, region = torch.empty(n, dtype=torch.long), torch.empty(n, dtype=torch.long)
    cyclic[layout.rolled.flatten()] = layout.cyclic.flatten()  # by original patch
    region[layout.rolled.flatten()] = layout.regions.flatten()
    naive = layout.naive.flatten()
    meet = (cyclic[:, None] == cyclic[None]) & (region[:, None] == region[None])
    assert torch.equal(meet, naive[:, None] == naive[None])
    assert layout.counts[0] == layout.counts[2] == (side // m) ** 2 < layout.counts[1] == (side // m + 1) ** 2


def test_swin_windows_figure_and_bad_sizes(tmp_path):
    png(plot_swin_windows(tmp_path / "swin.png"), min_width=1000)
    with pytest.raises(ValueError, match="side"):
        window_layout(10, 4, 2)
    with pytest.raises(ValueError, match="shift"):
        window_layout(8, 4, 4)
    with pytest.raises(ValueError, match="toy_side"):
        plot_swin_windows(tmp_path / "bad.png", toy_side=10)
