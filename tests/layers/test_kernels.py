"""Kernels chosen by measurement (aiayn.layers.kernels): every candidate computes F.linear's product, the timed choice
is written to the cache file of this CPU and torch version and read back by a fresh process, the environment
variable and use() force a kernel or the fixed rules, and a compiled step's products are timed before it is
traced."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

import aiayn
from aiayn.layers import fast, kernels
from aiayn.layers.linear import linear

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def measuring(tmp_path, monkeypatch):
    """Measure mode, with a cache folder of the test's own and nothing held in memory."""
    monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AIAYN_KERNELS", "measure")
    kernels.forget()
    yield tmp_path / "cache"
    kernels.forget()
    kernels.use(None)


@pytest.mark.parametrize("rows", [1, 3, 8, 100])
@pytest.mark.parametrize("bias", [True, False])
def test_every_candidate_computes_f_linear_s_product(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 384, generator=gen), torch.randn(512, 384, generator=gen)
    b = torch.randn(512, generator=gen) if bias else None
    want = F.linear(x, w, b)
    with torch.no_grad():
        for name, kernel in kernels.CANDIDATES.items():
            if kernels.applies(name, x, w, b):
                torch.testing.assert_close(kernel(x, w, b), want, atol=1e-4, rtol=1e-4, msg=name)


def test_a_measured_choice_is_kept_in_the_cache_file_and_read_back_by_another_process(measuring):
    w, b = torch.randn(768, 256), torch.randn(768)  # 196,608 weights: measured
    x = torch.randn(1, 256)
    with torch.no_grad():
        chosen = kernels.choose(x, w, b)
        torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b), atol=1e-4, rtol=1e-4)
    path = kernels.cache_file()
    assert path.is_relative_to(measuring) and path.is_file()
    saved = json.loads(path.read_text())
    key = kernels.key(1, w, b)
    assert saved == {key: chosen} and chosen in kernels.CANDIDATES and key.startswith("1|256|768|bias|float32|")
    # a fresh process reads the choice rather than timing again: a planted one (another kernel) is what it uses
    planted = next(n for n in ("linear", "swapped", "onednn") if n != chosen and kernels.applies(n, x, w, b))
    path.write_text(json.dumps({key: planted}))
    code = ("import torch; from aiayn.layers import kernels; torch.set_num_threads(1); "
            "print(kernels.choose(torch.randn(1, 256), torch.randn(768, 256), torch.randn(768)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.stdout.strip() == planted


def test_timings_pick_the_fastest_candidate_of_those_that_apply(measuring, monkeypatch):
    w = torch.randn(1024, 256)
    times = kernels.timings(2, w, None)
    assert set(times) <= set(kernels.CANDIDATES) and "linear" in times and all(t > 0 for t in times.values())
    monkeypatch.setattr(kernels, "timings", lambda rows, weight, bias: {"linear": 3.0, "swapped": 1.0, "onednn": 2.0})
    kernels.forget()
    assert kernels.choose(torch.randn(2, 256), w) == "swapped"  # the fastest of the (planted) timings


def test_the_environment_and_use_force_a_kernel_or_the_rules(measuring, monkeypatch):
    x, w = torch.randn(1, 256), torch.randn(768, 256)
    with torch.no_grad():
        for how in ("linear", "swapped", "onednn", "packed"):
            monkeypatch.setenv("AIAYN_KERNELS", how)
            kernels.forget()  # the variable is read once, again after forget()
            assert kernels.choose(x, w) == (how if kernels.applies(how, x, w, None) else "linear")
        monkeypatch.setenv("AIAYN_KERNELS", "rules")
        assert kernels.mode() == "packed"  # the variable is not read again before forget()
        kernels.forget()
        assert kernels.choose(x, w) == kernels.rules(x, w, None)
        kernels.use("linear")  # over the environment
        assert kernels.choose(x, w) == "linear"
    assert not kernels.cache_file().exists()  # nothing was timed
    monkeypatch.setenv("AIAYN_KERNELS", "fastest")
    kernels.use(None)
    kernels.forget()
    with pytest.raises(ValueError, match="AIAYN_KERNELS='fastest'"):
        kernels.choose(x, w)
    with pytest.raises(ValueError, match="use\\('quick'\\)"):
        kernels.use("quick")


def test_a_product_that_needs_a_gradient_or_is_small_is_not_timed(measuring):
    w = torch.randn(768, 256, requires_grad=True)
    x = torch.randn(1, 256)
    assert kernels.choose(x, w) == kernels.rules(x, w, None)  # oneDNN's op has no backward
    small = torch.randn(64, 64)
    kernels.choose(x[:, :64], small)
    assert not kernels.cache_file().exists()


def test_a_compiled_step_compiles_whole_in_measure_mode_and_keeps_the_rules(measuring):
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    gpt = aiayn.build(aiayn.preset("gpt-tiny", vocab_size=512, d_model=128, n_layers=1, max_len=32)).eval()
    ids = torch.randint(0, 512, (2, 5))
    eager = gpt.generate(ids, max_new_tokens=4)  # the eager products are timed (128 x 512: measured)
    assert any(k.startswith("2-3|128|512|") for k in json.loads(kernels.cache_file().read_text()))
    counters.clear()
    assert torch.equal(gpt.generate(ids, max_new_tokens=4, compile=True), eager)
    assert not counters["graph_break"]  # reading the thread count for the lookup once broke it at every product


def test_rows_fall_in_power_of_two_buckets():
    assert [kernels.bucket(n) for n in (1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 64, 128, 255, 256, 5000)] == [
        "1", "2-3", "2-3", "4-7", "4-7", "8-15", "8-15", "16-31", "16-31", "32-63", "64-127", "128-255", "128-255",
        "256+", "256+"]


@pytest.mark.parametrize(("faster", "kept"), [(0.95, "rules"), (0.85, "other")])
def test_a_near_tie_keeps_the_rules_choice(measuring, monkeypatch, faster, kept):
    w, x = torch.randn(1024, 256), torch.randn(2, 256)
    with torch.no_grad():
        ruled = kernels.rules(x, w, None)
    other = next(n for n in ("linear", "swapped", "onednn") if n != ruled and kernels.applies(n, x, w, None))
    monkeypatch.setattr(kernels, "timings", lambda rows, weight, bias: {ruled: 1.0, other: faster})
    with torch.no_grad():
        assert kernels.choose(x, w) == (ruled if kept == "rules" else other)


def test_timing_reads_weights_from_memory_not_the_cache(monkeypatch):
    # each candidate is timed over copies of the matrix, cycled, that together outgrow the largest cache (at most
    # MAX_COPIES of them): a model's weights come from memory, not from the cache a lone matrix would sit in
    seen: dict[str, set[int]] = {"linear": set(), "swapped": set()}

    def recorder(name):
        def run(x, w, b):
            seen[name].add(w.data_ptr())
            return F.linear(x, w, b)
        return run

    monkeypatch.setattr(kernels, "CANDIDATES", {n: recorder(n) for n in seen})
    w = torch.empty(256, 256)  # 256 KiB
    times = kernels.timings(1, w, None)
    assert set(times) <= set(seen) and "linear" in times
    cold = kernels._cold_bytes()
    assert cold >= 1 << 20
    want = min(kernels.MAX_COPIES, -(-cold // (256 * 256 * 4)))
    assert all(len(ptrs) == want for n, ptrs in seen.items() if n in times)
    seen["linear"].clear()
    big = torch.empty(4096, 4096)  # 64 MiB: as many copies as the cache needs (1 on a 32 MiB last-level cache)
    kernels.timings(1, big, None)
    assert len(seen["linear"]) == min(kernels.MAX_COPIES, -(-cold // (4096 * 4096 * 4))) < want


def test_a_kernel_that_wins_one_timing_but_not_the_next_leaves_the_rules_choice(measuring, monkeypatch):
    w, x = torch.randn(1024, 256), torch.randn(2, 256)
    with torch.no_grad():
        ruled = kernels.rules(x, w, None)
    others = [n for n in ("linear", "swapped", "onednn") if n != ruled and kernels.applies(n, x, w, None)]
    said = iter([{ruled: 1.0, others[0]: 0.5}, {ruled: 1.0, others[0]: 1.0}])  # a disturbed first timing
    monkeypatch.setattr(kernels, "timings", lambda rows, weight, bias: next(said))
    with torch.no_grad():
        assert kernels.choose(x, w) == ruled


needs_packing = pytest.mark.skipif(not fast._PACKABLE, reason="needs oneDNN's reorder of linear weights")


@needs_packing
def test_the_packed_kernel_reorders_a_weight_once_and_again_only_after_it_changes():
    from aiayn.layers.linear import Linear

    torch.manual_seed(0)
    layer = Linear(256, 512)
    x = torch.randn(16, 256)
    calls = []
    real = torch.ops.mkldnn._reorder_linear_weight
    before = set(fast._packs)

    def counted(w, rows):
        calls.append(tuple(w.shape))
        return real(w, rows)

    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.ops.mkldnn, "_reorder_linear_weight", counted, raising=False)
        for _ in range(3):  # the whole matrix and a view of its rows (attention's query rows): one copy each
            torch.testing.assert_close(fast.linear_packed(x, layer.weight, layer.bias), layer(x), atol=1e-4, rtol=1e-4)
            rows = layer.weight[128:384]
            torch.testing.assert_close(fast.linear_packed(x, rows, None), x @ rows.t(), atol=1e-4, rtol=1e-4)
        assert calls == [(512, 256), (256, 256)]
        layer.weight.mul_(2)  # changed in place (an optimizer's step, load_state_dict): reordered again
        torch.testing.assert_close(fast.linear_packed(x, layer.weight, None), x @ layer.weight.t(), atol=1e-4,
                                   rtol=1e-4)
        assert calls[-1] == (512, 256) and len(calls) == 3
    mine = set(fast._packs) - before
    assert len(mine) == 2
    del layer, rows  # the copies go with the weight that owns them
    assert not mine & set(fast._packs)


@needs_packing
def test_the_packed_kernel_never_applies_where_a_gradient_autocast_or_a_compile_is_wanted():
    w, x = torch.randn(512, 256), torch.randn(4, 256)
    with torch.no_grad():
        assert kernels.applies("packed", x, w, None)
        assert not kernels.applies("packed", x.double(), w.double(), None)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not kernels.applies("packed", x, w, None)
    w.requires_grad_(True)
    assert not kernels.applies("packed", x, w, None)


@needs_packing
def test_under_inference_mode_a_plain_weight_is_packed_and_one_made_there_takes_another_kernel(measuring):
    # a server's worker decodes under torch.inference_mode: the weights it reads were made outside it, and count
    # their changes; a tensor made inside has no version counter, so nothing could tell its copy was stale
    from aiayn.layers.linear import Linear

    torch.manual_seed(0)
    layer, x = Linear(256, 512), torch.randn(16, 256)
    with torch.inference_mode():
        made_here = torch.randn(512, 256)
        torch.testing.assert_close(fast.linear_packed(x, layer.weight[:300], None), x @ layer.weight[:300].t(),
                                   atol=1e-4, rtol=1e-4)
        assert not kernels.applies("packed", x, made_here, None)
        torch.testing.assert_close(linear(x, made_here), x @ made_here.t(), atol=1e-4, rtol=1e-4)  # timed, then run
        assert kernels.table()  # measured there: the timing's own operands are plain tensors


def test_a_compiled_steps_choices_are_timed_once_kept_and_read_back(measuring, monkeypatch):
    # prepare_compiled: measure mode times whether one row takes inductor's multiply-and-sum, and whether more rows
    # take the blocked copies, once per machine, keeps the answers in the cache file and reads them back; a forced
    # kernel turns both off; the rules leave the switches
    timed = []
    monkeypatch.setattr(kernels, "measure_reduced", lambda: timed.append("reduced") or False)
    monkeypatch.setattr(kernels, "measure_packed", lambda: timed.append("packed") or True)
    monkeypatch.setattr(fast, "REDUCE_ONE_ROW", True)
    monkeypatch.setattr(fast, "PACK_COMPILED", False)
    kernels.prepare_compiled()
    threads = torch.get_num_threads()
    reduced, packed = f"compiled-1|reduced|{threads}t", f"compiled-{fast.PACK_ROWS}|packed|{threads}t"
    assert not fast.REDUCE_ONE_ROW and fast.PACK_COMPILED and timed == ["reduced", "packed"]
    assert json.loads(kernels.cache_file().read_text()) == {reduced: "rules", packed: "packed"}
    kernels.prepare_compiled()  # held in memory: not timed again
    kernels.forget()
    kernels.cache_file().write_text(json.dumps({reduced: "reduced", packed: "rules"}))  # a fresh read: the file's
    kernels.prepare_compiled()
    assert fast.REDUCE_ONE_ROW and not fast.PACK_COMPILED and timed == ["reduced", "packed"]
    kernels.use("onednn")
    kernels.prepare_compiled()
    assert not fast.REDUCE_ONE_ROW and not fast.PACK_COMPILED
    fast.REDUCE_ONE_ROW = fast.PACK_COMPILED = True
    kernels.use("rules")
    kernels.prepare_compiled()
    assert fast.REDUCE_ONE_ROW and fast.PACK_COMPILED


def slowly(kernel):
    """``kernel``, 2 ms slower a call."""
    def run(*args):
        time.sleep(0.002)
        return kernel(*args)
    return run


@pytest.mark.parametrize("slow", ["packed", "rules"])
def test_timing_the_blocked_copy_for_a_compiled_step_keeps_the_faster_way(slow, monkeypatch):
    # measure_packed times PACK_ROWS rows over the blocked copy against the rules' product for them in a compiled
    # step: whichever is made 2 ms a call slower loses
    monkeypatch.setattr(kernels, "REDUCED_SHAPE", (64, 32))
    monkeypatch.setattr(kernels, "_cold_bytes", lambda: 0)  # one copy of the matrix
    for name in ("packed",) if slow == "packed" else ("onednn", "linear", "swapped"):
        monkeypatch.setitem(kernels.CANDIDATES, name, slowly(kernels.CANDIDATES[name]))
    assert kernels.measure_packed() == (slow == "rules")


@pytest.mark.parametrize("slow", ["reduced", "rules"])
def test_timing_the_reduced_product_keeps_the_faster_way(slow, monkeypatch):
    # measure_reduced times the compiled multiply-and-sum against the rules' one-row product: whichever is made
    # 2 ms a call slower loses
    monkeypatch.setattr(kernels, "REDUCED_SHAPE", (64, 32))
    monkeypatch.setattr(kernels, "_cold_bytes", lambda: 0)  # one copy of the matrix

    if slow == "reduced":
        monkeypatch.setattr(fast, "linear_reduced", slowly(fast.linear_reduced))
    else:
        for name in ("onednn", "linear"):
            monkeypatch.setitem(kernels.CANDIDATES, name, slowly(kernels.CANDIDATES[name]))
    torch._dynamo.reset()
    assert kernels.measure_reduced() == (slow == "rules")
