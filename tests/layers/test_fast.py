"""Each trick of ``aiayn.layers.fast`` equals the plain path it stands in for, and the switch turns it off.

Swin's window attention is tested in ``tests/models/test_swin.py``.
"""

import platform

import pytest
import torch
import torch.nn.functional as F

from aiayn.layers import FeedForward, fast
from aiayn.layers.linear import Linear, linear

ACTIVATIONS = ["gelu", "gelu_tanh", "relu", "silu"]


def refuse(*args, **kwargs):
    raise AssertionError("the fast path ran")


# --- the switch


@pytest.mark.parametrize("swap", [True, False])  # AVX2's products, and every other CPU's
def test_the_switch_off_takes_the_plain_paths_and_on_the_fast_ones(swap, monkeypatch):
    monkeypatch.setattr(fast, "SWAP_FEW_ROWS", swap)
    for trick in ("linear_few_rows", "linear_onednn", "linear_packed", "feedforward_no_grad"):
        monkeypatch.setattr(fast, trick, refuse)
    ff, x = FeedForward(8, 32), torch.randn(2, 3, 8)
    few, large = (torch.randn(4, 8), torch.randn(fast.ONEDNN_MIN // 8, 8))  # few rows; a large matrix
    monkeypatch.setattr(fast, "ENABLED", False)
    with torch.no_grad():
        ff(x)
        linear(x, large)
    linear(x, few)
    monkeypatch.setattr(fast, "ENABLED", True)
    with pytest.raises(AssertionError, match="fast path ran"), torch.no_grad():
        ff(x)
    with pytest.raises(AssertionError, match="fast path ran"), torch.no_grad():
        linear(x[:, :1] if swap else x, large)  # oneDNN (packed for few rows on AVX2)
    if swap:
        with pytest.raises(AssertionError, match="fast path ran"):
            linear(x, few)
    else:
        linear(x, few)  # F.linear: nothing to win on few rows by a small matrix


def test_a_compiled_step_takes_the_swapped_product_from_two_rows_on_avx2(monkeypatch):
    # inductor's own product (F.linear's layout) ran compiled AVX2 decoding at 16 rows 1.4x slower than the swapped
    # one, and beam search's 64 rows 1.2x faster; one row keeps it
    monkeypatch.setattr(fast, "SWAP_FEW_ROWS", True)
    monkeypatch.setattr(fast, "_compiling", lambda: True)
    w = torch.randn(4, 8)
    assert fast.linear_suits(torch.randn(2, 8), w) and fast.linear_suits(torch.randn(fast.COMPILED_FEW_ROWS, 8), w)
    assert not fast.linear_suits(torch.randn(1, 8), w)  # one row: F.linear, as before
    assert not fast.linear_suits(torch.randn(fast.COMPILED_FEW_ROWS + 1, 8), w)  # beam search's 64: F.linear
    monkeypatch.setattr(fast, "COMPILED_FEW_ROWS", 0)  # the switch the benchmark turns
    assert not fast.linear_suits(torch.randn(2, 8), w)


def test_a_compiled_few_rows_step_computes_the_eager_product():
    torch.manual_seed(0)
    layer, x = Linear(24, 40), torch.randn(3, 5, 24)
    compiled = torch.compile(layer, dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)


def test_the_fast_linear_is_left_to_f_linear_where_it_does_not_suit(monkeypatch):
    monkeypatch.setattr(fast, "SWAP_FEW_ROWS", True)
    w = torch.randn(4, 8)
    assert fast.linear_suits(torch.randn(3, 8), w)
    assert not fast.linear_suits(torch.randn(fast.FEW_ROWS + 1, 8), w)  # training-sized: F.linear
    assert not fast.linear_suits(torch.randn(0, 8), w)  # nothing to compute
    assert not fast.linear_suits(torch.randn(3, 8, dtype=torch.float64), w)  # F.linear's dtype error
    assert not fast.linear_suits(torch.randn(3, 8, device="meta"), w.to("meta"))  # not the CPU
    monkeypatch.setattr(fast, "SWAP_FEW_ROWS", False)
    assert not fast.linear_suits(torch.randn(3, 8), w)  # not AVX2: F.linear is as fast


# --- linear_few_rows == F.linear


@pytest.mark.parametrize("shape", [(1, 24), (3, 1, 24), (2, 5, 24), (fast.FEW_ROWS, 24)])
@pytest.mark.parametrize("bias", [True, False])
def test_few_rows_product_equals_f_linear_values_and_gradients(shape, bias):
    torch.manual_seed(0)
    x, w = torch.randn(*shape, requires_grad=True), torch.randn(40, 24, requires_grad=True)
    b = torch.randn(40, requires_grad=True) if bias else None
    inputs = [t for t in (x, w, b) if t is not None]
    got = fast.linear_few_rows(x, w, b)
    expected = F.linear(x, w, b)
    assert got.shape == expected.shape and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(got)
    for a, e in zip(torch.autograd.grad(got, inputs, g), torch.autograd.grad(expected, inputs, g)):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not fast._ONEDNN, reason="PyTorch built without oneDNN's linear")
@pytest.mark.parametrize("shape", [(1, 1, 1024), (2, 1024), (3, 5, 1024), (300, 1024)])
@pytest.mark.parametrize(("swap", "min_rows"), [(True, 4), (False, 4), (False, 1)])  # AVX2; Intel, AMD AVX-512
def test_onednn_takes_large_matrices_without_gradients_and_equals_f_linear(shape, swap, min_rows, monkeypatch):
    monkeypatch.setattr(fast, "SWAP_FEW_ROWS", swap)
    monkeypatch.setattr(fast, "ONEDNN_MIN_ROWS", min_rows)
    torch.manual_seed(0)
    x, w, b = torch.randn(*shape), torch.randn(1024, 1024), torch.randn(1024)
    rows = x.numel() // x.size(-1)
    # AVX2: one row only; elsewhere from ONEDNN_MIN_ROWS (on Intel, fewer stream faster through F.linear's product)
    assert fast.onednn_suits(x, w, b) == (rows == 1 if swap else rows >= fast.ONEDNN_MIN_ROWS)
    with torch.no_grad():  # outputs of size ~32 (sums of 1024 products): float rounding reaches 2e-5
        got = fast.linear_onednn(x, w, b)
        assert got.shape == (*shape[:-1], 1024) and got.is_contiguous()
        torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-4)
    assert not fast.onednn_suits(x, w.requires_grad_(), b)  # oneDNN's op has no backward
    assert not fast.onednn_suits(x, torch.randn(768, 768), None)  # below ONEDNN_MIN: F.linear (or the swap)
    assert not fast.onednn_suits(x.double(), w.detach().double(), None)  # float32 only
    assert not fast.onednn_suits(x[:0], w.detach(), None)  # nothing to compute


@pytest.mark.parametrize(("rows", "d"), [(3, 8), (1, 1024), (64, 1024)])
@pytest.mark.parametrize("swap", [True, False])
def test_linear_with_the_switch_on_equals_it_off(rows, d, swap, monkeypatch):
    monkeypatch.setattr(fast, "SWAP_FEW_ROWS", swap)
    torch.manual_seed(0)
    layer, x = Linear(d, d), torch.randn(rows, d)
    with torch.no_grad():
        on = layer(x)
        monkeypatch.setattr(fast, "ENABLED", False)
        off = layer(x)
    torch.testing.assert_close(on, off, rtol=1e-5, atol=1e-4)


# --- feedforward_no_grad == FeedForward's plain forward


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("chunk_rows", [3, 10, 4096])  # 10 rows: groups of 3, 3, 3, 1; one group; one group
def test_feedforward_without_gradients_equals_the_plain_path(activation, chunk_rows, monkeypatch):
    torch.manual_seed(0)
    ff = FeedForward(8, 32, activation=activation)
    x = torch.randn(2, 5, 8)
    before = x.clone()
    monkeypatch.setattr(fast, "ENABLED", False)
    with torch.no_grad():
        plain = ff(x)
        got = fast.feedforward_no_grad(x, ff.fc1, ff.activation_name, lambda h: ff.fc2(ff.dropout(h)),
                                       chunk_rows=chunk_rows)
    assert got.shape == plain.shape == (2, 5, 8)
    torch.testing.assert_close(got, plain)
    torch.testing.assert_close(x, before)  # the input is never overwritten, only the hidden layer


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_feedforward_with_gradients_keeps_the_plain_path_and_its_gradients(activation, monkeypatch):
    torch.manual_seed(0)
    ff = FeedForward(8, 32, activation=activation)
    x = torch.randn(2, 5, 8)
    results = []
    for enabled in (True, False):
        monkeypatch.setattr(fast, "ENABLED", enabled)
        ff.zero_grad()
        xi = x.clone().requires_grad_()
        ff(xi).square().sum().backward()  # an in-place activation would have destroyed the backward's input
        results.append([xi.grad] + [p.grad.clone() for p in ff.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)
    assert results[0][1].abs().sum() > 0  # fc1.weight learns


@pytest.mark.parametrize(("swap", "min_rows"), [(True, 4), (False, 4), (False, 1)])
def test_under_torch_compile_onednn_is_an_opaque_op_and_few_rows_are_swapped_on_avx2(swap, min_rows, monkeypatch,
                                                                                     traced_ops):
    # inductor lowers oneDNN's op only for weights its freezing packed, and its own product ran slower: the
    # oneDNN product goes in as the custom op aiayn::linear_onednn; on AVX2 2 to COMPILED_FEW_ROWS rows are swapped
    monkeypatch.setattr(fast, "SWAP_FEW_ROWS", swap)
    monkeypatch.setattr(fast, "ONEDNN_MIN_ROWS", min_rows)
    monkeypatch.setattr(fast, "REDUCE_ONE_ROW", False)  # the rules before these (their own tests follow)
    monkeypatch.setattr(fast, "PACK_COMPILED", False)
    ops, backend = traced_ops

    layer = Linear(1024, 1024)  # ONEDNN_MIN weights: oneDNN's, one row on AVX2, ONEDNN_MIN_ROWS or more elsewhere
    for rows in (1, 3, 4):
        ops.clear()
        x = torch.randn(rows, 1024)
        with torch.no_grad():
            got = torch.compile(layer, backend=backend, dynamic=False)(x)  # a graph per row count
            torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-4)
        onednn = fast._ONEDNN and (rows == 1 if swap else rows >= fast.ONEDNN_MIN_ROWS)
        assert any("linear_onednn" in op for op in ops) == onednn, ops
        swapped = swap and 1 < rows <= fast.COMPILED_FEW_ROWS  # (W x^T)^T: addmm, where F.linear is linear
        assert any("addmm" in op for op in ops) == swapped, ops
    small = Linear(64, 64)  # below ONEDNN_MIN: F.linear's own op, or swapped on AVX2
    ops.clear()
    with torch.no_grad():
        torch.compile(small, backend=backend)(torch.randn(3, 64))
    assert ops and not any("onednn" in op for op in ops), ops
    assert any("addmm" in op for op in ops) == swap, ops


@pytest.mark.skipif(not fast._PACKABLE, reason="this PyTorch has no oneDNN reorder")
def test_a_compiled_step_multiplies_rows_by_the_blocked_copy_and_never_by_a_stale_one(monkeypatch, traced_ops):
    # PACK_COMPILED: 2 rows or more by COMPILED_PACK_MIN weights or more go in as the op aiayn::linear_packed, which
    # finds the weight's blocked copy when it runs: the parameter's own (made again when it changes), a slice's made
    # for that memory while its owner lives unchanged (a compiled graph passes a slice as a fresh view), else the
    # plain matrix
    monkeypatch.setattr(fast, "REDUCE_ONE_ROW", False)
    monkeypatch.setattr(fast, "PACK_COMPILED", True)
    monkeypatch.setattr(fast, "COMPILED_PACK_MIN", 1000)
    ops, backend = traced_ops
    torch.manual_seed(0)
    layer, x, part = Linear(64, 96), torch.randn(5, 64), slice(32, 80)

    def both(x):
        return layer(x), layer.rows(x, part)

    def expected():
        return F.linear(x, layer.weight, layer.bias), F.linear(x, layer.weight[part], layer.bias[part])

    with torch.no_grad():
        torch.compile(both, backend=backend, dynamic=False)(x)
        assert sum("linear_packed" in op for op in ops) == 2, ops
        one = torch.compile(Linear(64, 96), backend=backend, dynamic=False)
        ops.clear()
        one(x[:1])  # one row: not packed
        assert not any("linear_packed" in op for op in ops), ops
        layer = Linear(64, 96)  # no copy of its slice made yet (the traced graph above ran eagerly: it made one)
        compiled = torch.compile(both, dynamic=False)  # inductor, the op called as it stands
        found = []
        monkeypatch.setattr(fast, "_held_pack", lambda w, held=fast._held_pack: found.append(held(w)) or found[-1])
        for change in range(3):
            with torch.inference_mode():
                got = compiled(x)
            for a, b in zip(got, expected()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
            assert found[0] is not None  # the parameter's own copy
            assert (found[1] is not None) == (change == 1)  # the slice's: only once eager made it, before a change
            found.clear()
            if change == 0:
                fast.linear_packed(x, layer.weight[part], layer.bias[part])  # eager: the slice's copy, for its owner
            else:
                layer.weight.mul_(-0.5)  # an optimizer's step: every copy made before it is stale
    monkeypatch.setattr(fast, "_compiling", lambda: True)
    w = torch.randn(40, 30)
    assert fast.packed_compiled_suits(torch.randn(2, 30), w)
    assert not fast.packed_compiled_suits(torch.randn(1, 30), w)  # one row streams the matrix
    assert not fast.packed_compiled_suits(torch.randn(2, 30), w[:, :20].contiguous()[:10])  # below COMPILED_PACK_MIN
    assert not fast.packed_compiled_suits(torch.randn(2, 30, requires_grad=True), w)
    assert fast.packed_compiled_suits(torch.randn(1, 30), w[:10], forced=True)
    with torch.inference_mode():
        made_here = torch.randn(40, 30)  # no version counter: a copy could go stale unseen, so the plain matrix
        assert fast._held_pack(torch.nn.Parameter(made_here, requires_grad=False)) is None
    monkeypatch.setattr(fast, "ENABLED", False)
    assert not fast.packed_compiled_suits(torch.randn(2, 30), w)


@pytest.mark.parametrize("bias", [True, False])
def test_a_compiled_step_multiplies_one_row_as_inductors_own_multiply_and_sum(bias, monkeypatch, traced_ops):
    # REDUCE_ONE_ROW (the rules' choice): one row by any matrix is the multiply-and-sum, no library product in the
    # graph (inductor writes the kernel); two rows keep the products before it; the values are F.linear's
    monkeypatch.setattr(fast, "REDUCE_ONE_ROW", True)
    monkeypatch.setattr(fast, "SWAP_FEW_ROWS", True)
    ops, backend = traced_ops

    torch.manual_seed(0)
    for layer in (Linear(1024, 1024, bias=bias), Linear(24, 40, bias=bias)):  # above and below ONEDNN_MIN
        for shape, one_row in (((1, 1, layer.in_features), True), ((2, layer.in_features), False)):
            ops.clear()
            x = torch.randn(shape)
            with torch.no_grad():
                got = torch.compile(layer, backend=backend, dynamic=False)(x)
                torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-4)
                assert got.shape == (*shape[:-1], layer.out_features)
            products = [op for op in ops if any(k in op for k in ("linear", "mm", "matmul", "onednn"))]
            assert (products == []) == one_row, ops
            assert any("realized" in op for op in ops) == one_row, ops  # its input made before it, not inside it
    with torch.no_grad():  # inductor's kernel itself, compiled, against F.linear
        layer, x = Linear(300, 700), torch.randn(1, 300)
        compiled = torch.compile(layer, dynamic=False)
        torch.testing.assert_close(compiled(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    w = torch.randn(4, 8)
    assert not fast.reduced_suits(torch.randn(1, 8), w)  # eager: never (it would make the (O, K) product)
    monkeypatch.setattr(fast, "_compiling", lambda: True)
    assert fast.reduced_suits(torch.randn(1, 8), w) and fast.reduced_suits(torch.randn(1, 8), w.to(torch.int8))
    assert not fast.reduced_suits(torch.randn(2, 8), w) and not fast.reduced_suits(torch.randn(1, 8).double(), w)
    assert not fast.reduced_suits(torch.randn(1, 8, requires_grad=True), w)
    monkeypatch.setattr(fast, "ENABLED", False)  # the one switch: the plain path
    assert not fast.reduced_suits(torch.randn(1, 8), w)


def test_linear_reduced_reads_int8_rows_with_their_scales():
    # weight-only int8: x (q s)^T + b, the activations not rounded
    torch.manual_seed(0)
    x, q = torch.randn(1, 32), torch.randint(-127, 128, (48, 32), dtype=torch.int8)
    scale, b = torch.rand(48) / 100, torch.randn(48)
    expected = F.linear(x, q.float() * scale[:, None], b)
    torch.testing.assert_close(fast.linear_reduced(x, q, b, scale), expected, rtol=1e-5, atol=1e-5)
    compiled = torch.compile(fast.linear_reduced, dynamic=False)
    torch.testing.assert_close(compiled(x, q, b, scale), expected, rtol=1e-5, atol=1e-5)


def test_the_fewest_rows_onednn_takes_follow_the_cpus_vendor():
    # MKL's matrix-vector product (F.linear) is the faster one for 1 to 3 rows on Intel CPUs, oneDNN's on AMD's
    vendor = fast.cpuinfo("vendor_id")
    assert vendor in ("GenuineIntel", "AuthenticAMD") or platform.machine() not in ("x86_64", "AMD64")
    expected = 4 if vendor == "GenuineIntel" else 1
    assert expected == fast.ONEDNN_MIN_ROWS


@pytest.mark.skipif(not fast._ONEDNN, reason="needs oneDNN")
def test_cpu_op_registers_the_kernel_and_its_shape_for_tracing():
    # fast.cpu_op puts the kernel at the dispatcher's CPU key and the shape rule at fake tensors: the op called
    # directly computes F.linear's product, and on the meta device it gives the shape alone
    x, w, b = torch.randn(3, 16), torch.randn(24, 16), torch.randn(24)
    torch.testing.assert_close(torch.ops.aiayn.linear_onednn(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.ops.aiayn.linear_onednn(x, w, None), F.linear(x, w), rtol=1e-5, atol=1e-5)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        out = torch.ops.aiayn.linear_onednn(mode.from_tensor(x), mode.from_tensor(w), None)
    assert out.shape == (3, 24)


# --- weights in huge pages

needs_huge_pages = pytest.mark.skipif(not fast.huge_pages_available(),
                                      reason="needs Linux transparent huge pages (madvise)")


def _held() -> torch.nn.Module:
    """Three things a move must keep: a tie (one Parameter in two modules), views into one buffer's storage at
    offsets and strides of their own, and a matrix larger than a huge page."""
    torch.manual_seed(0)
    m = torch.nn.Module()
    m.big = torch.nn.Linear(600, 1024)  # 2.3 MiB of weights
    m.tied = torch.nn.Linear(600, 1024, bias=False)
    m.tied.weight = m.big.weight
    base = torch.randn(1000)
    m.register_buffer("base", base)
    m.register_buffer("part", base[100:300].view(10, 20).t())  # a view at an offset, transposed
    return m


@needs_huge_pages
def test_in_huge_pages_keeps_values_ties_and_views():
    m = _held()
    before = {n: t.clone() for n, t in [*m.named_parameters(), *m.named_buffers()]}
    pointers = {n: t.data_ptr() for n, t in [*m.named_parameters(), *m.named_buffers()]}
    weight = m.big.weight
    nbytes = sum(t.untyped_storage().nbytes() for t in (m.big.weight, m.big.bias, m.base))  # three storages
    assert fast.in_huge_pages(m) == nbytes
    for n, t in [*m.named_parameters(), *m.named_buffers()]:
        assert torch.equal(t, before[n]), n
        assert t.data_ptr() != pointers[n], n  # new memory ...
    assert m.big.weight is weight and m.tied.weight is m.big.weight  # ... in the same objects, the tie kept
    assert m.part.data_ptr() - m.base.data_ptr() == 100 * 4 and m.part.stride() == (1, 20)
    m.base[150] = 7.0  # the view still reads its base's memory
    assert m.part[10, 2] == 7.0  # base[100 + 2 * 20 + 10]
    assert min(t.data_ptr() for t in (m.big.weight, m.big.bias, m.base)) % fast.HUGE_PAGE == 0  # aligned
    assert fast.in_huge_pages(m) == 0  # moved once


@needs_huge_pages
def test_weights_in_huge_pages_still_train_and_free_their_memory_with_the_model():
    import gc

    m, plain = _held(), _held()
    fast.in_huge_pages(m)
    x = torch.randn(4, 600)
    for model in (m, plain):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model.big(x).square().sum().backward()
        opt.step()
    torch.testing.assert_close(m.big.weight, plain.big.weight)
    assert m.big.weight.grad is not None and fast._in_arena(m.big.weight.data_ptr())
    arena = fast._arenas[-1][2]
    assert arena() is not None
    del m, opt, model
    gc.collect()
    assert arena() is None  # the mapping went with the last tensor in it


@needs_huge_pages
def test_in_huge_pages_fills_blocks_of_bounded_size_and_leaves_what_it_cannot_move(monkeypatch):
    # blocks of at most HUGE_BLOCK bytes (so moving needs at most one block more than the model), a storage larger
    # than a block in one of its own; a sparse buffer (no plain storage to point into) stays where it is
    monkeypatch.setattr(fast, "HUGE_BLOCK", 1 << 20)
    m = _held()  # a 2.3 MiB matrix, its bias, a 4 KB buffer
    m.register_buffer("sparse", torch.eye(8).to_sparse())
    values = m.sparse._values().data_ptr()
    before = [t.clone() for t in (m.big.weight, m.big.bias, m.base)]
    fast.in_huge_pages(m)

    def block(t):
        (found,) = [a[2]() for a in fast._arenas if a[0] <= t.data_ptr() < a[1]]
        return found

    assert block(m.big.weight) is not block(m.big.bias)  # the matrix alone; the bias and the buffer together
    assert block(m.big.bias) is block(m.base)
    for t, was in zip((m.big.weight, m.big.bias, m.base), before):
        assert torch.equal(t, was)
    assert m.sparse._values().data_ptr() == values


def test_in_huge_pages_does_nothing_where_the_system_has_none(monkeypatch):
    monkeypatch.setattr(fast, "huge_pages_available", lambda: False)
    m = _held()
    pointer = m.big.weight.data_ptr()
    assert fast.in_huge_pages(m) == 0 and m.big.weight.data_ptr() == pointer


@needs_huge_pages
@pytest.mark.parametrize("huge, enabled", [(True, True), (False, True), (True, False)])
def test_a_compiled_cpu_session_moves_the_weights_where_the_switches_allow(huge, enabled, monkeypatch):
    from aiayn.layers.session import prepare_compiled

    monkeypatch.setattr(fast, "HUGE_PAGES", huge)
    monkeypatch.setattr(fast, "ENABLED", enabled)
    m = _held()
    prepare_compiled(m, torch.device("cpu"))
    assert fast._in_arena(m.big.weight.data_ptr()) == (huge and enabled)
