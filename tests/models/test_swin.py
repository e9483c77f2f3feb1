import pytest
import torch

import aiayn
from aiayn.layers import fast, record_attention
from aiayn.layers.vision import (
    PatchMerging,
    relative_position_index,
    shifted_window_mask,
    window_index,
    window_partition,
    window_reverse,
)
from aiayn.models.swin import SwinBlock, SwinConfig


@pytest.mark.parametrize("name, count", [("swin-t", 28_288_354), ("swin-s", 49_606_258), ("swin-b", 87_768_224),
                                         ("swin-l", 196_532_476)])
def test_preset_parameter_counts_are_the_papers(name, count):
    with torch.device("meta"):
        model = aiayn.build(name)
    assert aiayn.count_parameters(model) == count
    # the relative position index is a buffer that follows from M, neither a parameter nor saved
    assert not any("index" in k for k in model.state_dict())


def test_window_partition_then_reverse_is_the_identity():
    x = torch.randn(2, 8, 12, 3)
    windows = window_partition(x, 4)  # (2 * 2 * 3, 16, 3)
    assert windows.shape == (12, 16, 3)
    torch.testing.assert_close(windows[0].view(4, 4, 3), x[0, :4, :4])  # the top-left window, row-major
    torch.testing.assert_close(windows[1].view(4, 4, 3), x[0, :4, 4:8])  # then the one to its right
    torch.testing.assert_close(window_reverse(windows, 4, 8, 12), x)


@pytest.mark.parametrize("shift", [0, 2])
def test_window_index_gathers_the_rolled_windows(shift):
    x = torch.randn(2, 8, 12, 3)
    expected = window_partition(torch.roll(x, shifts=(-shift, -shift), dims=(1, 2)), 4)  # (2 * 6, 16, 3)
    index = window_index(8, 12, 4, shift)
    torch.testing.assert_close(x.flatten(1, 2)[:, index].reshape(-1, 16, 3), expected)
    assert sorted(index.tolist()) == list(range(96))  # every patch once: writing back undoes it
    if shift:  # the top-left shifted window starts at patch (2, 2) of the map: 2 * 12 + 2
        assert index[:5].tolist() == [26, 27, 28, 29, 38]


def test_shift_mask_equals_the_one_drawn_by_hand():
    # a 2 x 4 map, windows of 2, shift 1: after the roll, regions  a a b c / d d e f
    mask = shifted_window_mask(2, 4, window=2, shift=1)
    assert mask.tolist() == [
        [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]],  # window 0: a a / d d
        [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],  # window 1: b c / e f, all apart
    ]


def test_relative_position_index_by_hand():
    # window 2: patches (0,0) (0,1) (1,0) (1,1); index (dy + 1) * 3 + (dx + 1)
    assert relative_position_index(2).tolist() == [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]
    # the same window in the table of a window of 3 (5 x 5 offsets): the middle of it
    assert relative_position_index(2, 3).tolist() == [[12, 11, 7, 6], [13, 12, 8, 7], [17, 16, 12, 11],
                                                      [18, 17, 13, 12]]


def block(shift: int) -> SwinBlock:
    torch.manual_seed(0)
    b = SwinBlock(d_model=8, n_heads=2, window=4, shift=shift).eval()
    with torch.no_grad():
        b.relative_position.table.normal_()
    return b


def affected(b: SwinBlock, x: torch.Tensor, at: tuple[int, int]) -> set[tuple[int, int]]:
    changed = x.clone()
    changed[0, at[0], at[1]] += torch.randn(x.size(-1))
    with torch.no_grad():
        diff = (b(changed) - b(x)).abs().sum(-1)[0]  # (H, W)
    return {tuple(p) for p in (diff > 1e-6).nonzero().tolist()}


@pytest.fixture(params=[True, False], ids=["fast", "plain"])
def either_path(request, monkeypatch):
    """Run the test with ``aiayn.layers.fast.ENABLED`` on and off."""
    monkeypatch.setattr(fast, "ENABLED", request.param)


@pytest.mark.parametrize("at", [(0, 0), (1, 6), (3, 5), (6, 1), (7, 7)])
def test_a_patch_reaches_only_its_shifted_window_region(at, either_path):
    # On an 8 x 8 map with M = 4, s = 2 the shifted windows, drawn on the unrolled map, are the cells of
    # the grid cut at 2 and 6 (figure 2, right); SW-MSA never crosses them, nor wraps around the map.
    x = torch.randn(1, 8, 8, 8)
    def cell(i):  # 0 for 0-1, 1 for 2-5, 2 for 6-7
        return (i - 2 + 4) // 4

    expected = {(i, j) for i in range(8) for j in range(8) if (cell(i), cell(j)) == (cell(at[0]), cell(at[1]))}
    assert affected(block(shift=2), x, at) == expected


def test_an_unshifted_block_stays_inside_its_window(either_path):
    x = torch.randn(1, 8, 8, 8)
    assert affected(block(shift=0), x, (5, 2)) == {(i, j) for i in range(4, 8) for j in range(4)}


# The fast path (one gather, groups of windows, one scatter) against the plain roll, partition, attend,
# reverse, roll back. Maps: whole windows; padded (7 x 10 -> 8 x 12); smaller than a window (one window,
# unshifted). chunk_tokens 48 = 3 windows of 16: groups straddle the two images and pick their windows' masks.
MAPS = [(8, 8), (7, 10), (3, 3)]


@pytest.mark.parametrize("shift", [0, 2])
@pytest.mark.parametrize("size", MAPS)
@pytest.mark.parametrize("chunk_tokens", [48, 4096])
def test_fast_window_attention_without_gradients_equals_the_plain_steps(shift, size, chunk_tokens, monkeypatch):
    b = block(shift)
    x = torch.randn(2, *size, 8)
    monkeypatch.setattr("aiayn.models.swin.model.CHUNK_TOKENS", chunk_tokens)
    calls = []  # windows and patches per window of each call of attention
    b.attn.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[:2]))
    with torch.no_grad():
        monkeypatch.setattr(fast, "ENABLED", False)
        plain = b.window_attention(x)
        monkeypatch.setattr(fast, "ENABLED", True)
        got = b.window_attention(x)
    assert got.shape == plain.shape == x.shape
    torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5)
    (windows, t), groups = calls[0], [n for n, _ in calls[1:]]  # the plain path attends every window at once
    step = chunk_tokens // t
    assert sum(groups) == windows and groups == [min(step, windows - i) for i in range(0, windows, step)]


@pytest.mark.parametrize("shift", [0, 2])
@pytest.mark.parametrize("size", MAPS)
def test_fast_window_attention_with_gradients_equals_the_plain_steps(shift, size, monkeypatch):
    monkeypatch.setattr("aiayn.models.swin.model.CHUNK_TOKENS", 48)  # with gradients: one group all the same
    b = block(shift)
    x = torch.randn(2, *size, 8)
    results = []
    for enabled in (True, False):
        monkeypatch.setattr(fast, "ENABLED", enabled)
        b.zero_grad()
        xi = x.clone().requires_grad_()
        out = b.window_attention(xi)
        out.square().sum().backward()
        results.append([out, xi.grad] + [p.grad.clone() for p in b.parameters() if p.grad is not None])
    assert len(results[0]) == len(results[1]) > 2
    for a, e in zip(*results):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    assert results[0][-1].abs().sum() > 0  # the bias table, the last parameter that learns here


def test_the_whole_model_computes_the_same_with_the_fast_paths_on_and_off(monkeypatch):
    model = tiny()
    images = torch.randn(2, 1, 27, 30)
    monkeypatch.setattr("aiayn.models.swin.model.CHUNK_TOKENS", 48)
    monkeypatch.setattr("aiayn.layers.feedforward.CHUNK_ROWS", 48)
    with torch.no_grad():
        on = model(images)
        monkeypatch.setattr(fast, "ENABLED", False)
        off = model(images)
    torch.testing.assert_close(on, off, rtol=1e-5, atol=1e-5)


def tiny(**kw):
    torch.manual_seed(0)
    model = aiayn.build("swin-tiny", patch_size=2, d_model=8, n_layers=(2, 2), n_heads=(2, 2), window_size=4, **kw)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("table"):
                p.normal_()
    return model.eval()


def test_any_image_size_runs_padded_and_cropped_back():
    model = tiny()
    for h, w in [(28, 28), (27, 30), (9, 9), (2, 2)]:
        with torch.no_grad():
            features = model.forward_features(torch.randn(2, 1, h, w))
        grid = (-(-h // 2), -(-w // 2))  # patches of 2, rounded up
        assert features.shape == (2, -(-grid[0] // 2), -(-grid[1] // 2), 16)
        assert model(torch.randn(2, 1, h, w)).shape == (2, 10)


def test_fused_attention_equals_the_explicit_path_and_the_bias_reaches_it():
    model = tiny()
    images = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        fused = model(images)
        with record_attention(model) as rec:  # weights recorded: the explicit softmax path
            explicit = model(images)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    weights = rec["stages.0.blocks.1.attn"][0]  # (B * nW, heads, T, T): 14 x 14 map padded to 16, 4 windows
    assert weights.shape == (2 * 16, 2, 16, 16)
    # the last window of the shifted block mixes wrapped-around patches: many weights are exactly zero there
    assert (weights[15] == 0).float().mean() > 0.5 and (weights[0] == 0).sum() == 0
    # the relative position bias enters both paths: a changed table changes both outputs, and alike
    with torch.no_grad():
        model.stages[0].blocks[0].relative_position.table.normal_(std=1.0)
        biased = model(images)
        with record_attention(model):
            biased_explicit = model(images)
    assert (biased - fused).abs().max() > 100 * (fused - explicit).abs().max() + 1e-6
    torch.testing.assert_close(biased, biased_explicit, atol=1e-5, rtol=1e-5)


def test_patch_merging_concatenates_two_by_two_neighbours():
    merge = PatchMerging(1)
    seen = []
    merge.norm.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    out = merge(torch.arange(16.0).view(1, 4, 4, 1))  # a 4 x 4 map of one channel, 0 .. 15 row-major
    assert out.shape == (1, 2, 2, 2)
    # each group in the reference order (even row, even col), (odd, even), (even, odd), (odd, odd)
    assert seen[0][0, 0, 0].tolist() == [0, 4, 1, 5] and seen[0][0, 1, 1].tolist() == [10, 14, 11, 15]
    # odd sizes are padded with zeros at the bottom and right
    assert merge(torch.ones(1, 3, 5, 1)).shape == (1, 2, 3, 2) and seen[1][0, 1, 2].tolist() == [1, 0, 0, 0]


def test_every_parameter_learns_and_save_load_keep_the_model(tmp_path):
    model = tiny(drop_path=0.1).train()
    model(torch.randn(2, 1, 28, 28)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.eval()
    aiayn.save(model, tmp_path)
    loaded = aiayn.load(tmp_path).eval()  # eval: no stochastic depth
    assert loaded.cfg == model.cfg and loaded.cfg.n_layers == (2, 2)
    images = torch.randn(2, 1, 20, 24)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), model(images))


def test_wrong_images_and_configs_are_refused_with_names():
    model = tiny()
    with pytest.raises(ValueError, match=r"images have 3 channels .* wants in_channels=1"):
        model(torch.randn(2, 3, 28, 28))
    with pytest.raises(ValueError, match=r"got shape \(3, 28\)"):
        model(torch.randn(3, 28))
    with pytest.raises(ValueError, match=r"n_layers=.* and n_heads=.* one value per stage"):
        SwinConfig(n_heads=(3, 6))
    with pytest.raises(ValueError, match=r"stage 2 has 192 channels .* n_heads\[1\]=5"):
        SwinConfig(n_heads=(3, 5, 12, 24))


def test_stochastic_depth_drops_the_two_branches_of_a_block_independently():
    # the reference calls DropPath once per branch: with rate 0.5 each image keeps neither, one or both branches
    torch.manual_seed(0)
    block = SwinBlock(8, 2, window=2, shift=0, drop_path=0.5).train()
    block.window_attention = lambda x: torch.ones_like(x)  # branch outputs 1 and 10, so the sum tells which kept
    del block.ff
    block.ff = lambda x: 10 * torch.ones_like(x)
    out = block(torch.zeros(400, 2, 2, 8))[:, 0, 0, 0]  # 0 + 2 * kept_attention + 20 * kept_mlp
    assert sorted(set(out.tolist())) == [0.0, 2.0, 20.0, 22.0]
    assert abs((out == 22.0).float().mean().item() - 0.25) < 0.08
