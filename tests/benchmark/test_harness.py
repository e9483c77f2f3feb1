"""The benchmark harness: its bookkeeping with fake sides and a fake clock (no timing is asserted), the quartile
rule for targets, its FLOP and memory counters against numbers worked by hand, the results files and the page
made from them (older files too, and the committed page is what the committed results make), and every real case
at toy sizes: it builds, and ours computes what the peer computes."""

import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import aiayn
from aiayn.analysis.flops import KERNEL_FLOPS, sdpa_flops
from aiayn.benchmark import NAMES, run_bench
from aiayn.benchmark.cases import CASES
from aiayn.benchmark.harness import (
    MIN_ROUNDS,
    SCHEMA,
    Case,
    Settings,
    Side,
    Target,
    Unavailable,
    count_flops,
    measure,
    peak_memory,
    quartiles,
    write_result,
)
from aiayn.benchmark.report import page, read_results, write_report
from aiayn.decoding import sample
from aiayn.layers.linear import linear

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
# The real cases compare with Hugging Face models (built from configs, no downloads).
hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs the hf extra (transformers)")



class FakeClock:
    """Time moves only when a fake side says it worked for so many seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_sides(clock, log, durations):
    """Sides that append their name to ``log`` and advance ``clock`` by their next duration."""

    def side(name, times):
        times = iter(times)

        def run():
            log.append(name)
            clock.now += next(times)

        return Side(name, run)

    return [side(name, times) for name, times in durations.items()]


TARGET = Target(1.5, mfu=0.8)


def fake_case(clock, log, durations, target=TARGET, checks=None, flops=20.0):
    sides = fake_sides(clock, log, durations)
    checks = checks if checks is not None else {s.name: {"what": "made up", "ok": True} for s in sides[1:]}
    return Case("fake", "made-up sides", sides, units=4, unit="tokens", checks=checks, target=target, flops=flops)


def test_sides_alternate_and_medians_ratios_throughput_and_mfu_are_right():
    clock, log = FakeClock(), []
    # per side: warm-up, 3 rounds, then the profiled unit
    case = fake_case(clock, log, {"ours": [9, 3, 1, 2, 9], "peer": [9, 6, 4, 2, 9]})
    r = measure(case, Settings(peak_flops=10.0, rounds=3, warmup=1, clock=clock))
    assert log == ["ours", "peer", "ours", "peer", "peer", "ours", "ours", "peer", "ours", "peer"]  # warm-up,
    ours, peer = r["sides"]["ours"], r["sides"]["peer"]  # A B, B A, A B (each round one side later), memory
    assert ours["seconds"] == [3, 1, 2] and peer["seconds"] == [6, 4, 2]
    assert ours["median_s"] == 2 and peer["median_s"] == 4
    assert ours["throughput"] == 4 / 2 and peer["throughput"] == 4 / 4
    assert ours["mfu"] == 20 / 2 / 10 and peer["mfu"] == 20 / 4 / 10
    assert r["peers"]["peer"]["ratios"] == [2, 4, 1]  # t_peer / t_ours, round by round
    assert r["peers"]["peer"]["ratio"] == 2  # their median, not the ratio of the medians
    # quartiles of 1, 2, 4 by linear interpolation: a quarter of the way is half way from 1 to 2
    assert r["peers"]["peer"]["ratio_q1"] == 1.5 and r["peers"]["peer"]["ratio_q3"] == 3
    assert ours["mfu_q1"] == pytest.approx((2 / 3 + 1) / 2) and ours["mfu_q3"] == 1.5  # per-round MFU 2/3, 2, 1
    assert r["peers"]["peer"]["met"] is True  # lower quartiles: ratio 1.5 >= 1.5 and MFU 0.83 >= 0.8


def test_three_sides_alternate_a_b_c_and_each_peer_gets_its_own_ratio():
    clock, log = FakeClock(), []
    case = fake_case(clock, log, {"a": [1, 2, 2, 1], "b": [1, 4, 4, 1], "c": [1, 1, 1, 1]}, target=Target(1.5))
    r = measure(case, Settings(peak_flops=1.0, rounds=2, warmup=1, clock=clock))
    assert log == ["a", "b", "c"] + ["a", "b", "c"] + ["b", "c", "a"] + ["a", "b", "c"]  # warm-up, 2 rounds, memory
    assert r["peers"]["b"]["ratio"] == 2 and r["peers"]["b"]["ratio_q1"] == 2 and r["peers"]["b"]["met"] is True
    assert r["peers"]["c"]["ratio"] == 0.5 and r["peers"]["c"]["met"] is False


def test_quartiles_are_torchs_linear_quantiles_and_one_round_is_its_own():
    rng = torch.Generator().manual_seed(0)
    for n in (2, 3, 7, 10):
        values = torch.rand(n, generator=rng, dtype=torch.float64)
        q1, q3 = quartiles(values.tolist())
        assert q1 == pytest.approx(torch.quantile(values, 0.25).item())
        assert q3 == pytest.approx(torch.quantile(values, 0.75).item())
    assert quartiles([1.3]) == (1.3, 1.3)
    assert Settings(peak_flops=1.0).rounds == MIN_ROUNDS == 7


def seven_rounds(ratios):
    """Measure a fake case of 7 rounds in which ours takes 1 s a round and the peer ``ratios`` s, target 1.2x."""
    clock, log = FakeClock(), []
    case = fake_case(clock, log, {"ours": [1.0] * 9, "peer": [1.0, *ratios, 1.0]}, target=Target(1.2))
    return measure(case, Settings(peak_flops=1.0, rounds=7, clock=clock))


def test_a_target_is_met_only_when_the_lower_quartile_of_the_rounds_clears_it():
    # the median (1.3) clears 1.2, but the lower quartile (1.0 + 1.3) / 2 = 1.15 does not: two slow rounds in seven
    r = seven_rounds([1.3, 0.9, 1.4, 1.3, 1.0, 1.5, 1.3])["peers"]["peer"]
    assert r["ratio"] == pytest.approx(1.3) and r["ratio_q1"] == pytest.approx(1.15) and r["met"] is False
    # one slow round in seven: the lower quartile (1.25 + 1.3) / 2 = 1.275 clears it
    r = seven_rounds([1.3, 0.9, 1.4, 1.3, 1.25, 1.5, 1.3])["peers"]["peer"]
    assert r["ratio_q1"] == pytest.approx(1.275) and r["ratio_q3"] == pytest.approx(1.35) and r["met"] is True


def test_an_mfu_target_is_met_only_when_the_lower_quartile_of_ours_per_round_mfu_clears_it():
    clock, log = FakeClock(), []
    ours = [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0]  # MFU 1.0 in five rounds, 0.5 in two
    case = fake_case(clock, log, {"ours": ours, "peer": [3.0] * 9}, target=Target(1.2, mfu=0.9), flops=1.0)
    r = measure(case, Settings(peak_flops=1.0, rounds=7, clock=clock))
    assert r["sides"]["ours"]["mfu"] == 1.0 and r["sides"]["ours"]["mfu_q1"] == 0.75  # median 1.0 >= 0.9
    assert r["peers"]["peer"]["ratio_q1"] >= 1.5 and r["peers"]["peer"]["met"] is False


def test_a_failed_check_misses_the_target_and_no_target_is_neither_met_nor_missed():
    clock, log = FakeClock(), []
    case = fake_case(clock, log, {"ours": [1, 1, 1], "peer": [1, 5, 1]},
                     checks={"peer": {"what": "logits", "ok": False}})
    r = measure(case, Settings(peak_flops=1.0, rounds=1, clock=clock))
    assert r["peers"]["peer"]["ratio"] == 5 and r["peers"]["peer"]["met"] is False
    case = fake_case(clock, log, {"ours": [1, 1, 1], "peer": [1, 5, 1]}, target=None)
    assert measure(case, Settings(peak_flops=1.0, rounds=1, clock=clock))["peers"]["peer"]["met"] is None
    with pytest.raises(ValueError, match="distinct names"):
        Case("x", "", [Side("a", print), Side("a", print)], 1, "tokens", {})
    with pytest.raises(ValueError, match="rounds=0"):
        Settings(peak_flops=1.0, rounds=0)


def test_count_flops_counts_matmuls_and_the_cpu_attention_kernel_forward_and_backward():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert count_flops(lambda: a @ b) == 2 * 8 * 16 * 4
    q, k, v = (torch.randn(2, 3, 5, 4, requires_grad=True) for _ in range(3))  # (B, H, T, D)
    forward = sdpa_flops(q.shape, k.shape, v.shape)
    assert forward == 2 * (2 * 2 * 3 * 5 * 5 * 4)
    assert count_flops(lambda: F.scaled_dot_product_attention(q, k, v)) == forward
    # backward: scores recomputed, then dV, dP, dQ, dK: five matmuls of the same size
    assert count_flops(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward()) == forward + 5 * forward // 2


def test_count_flops_works_under_no_grad_with_learned_positions():
    # FlopCounterMode's module tracker fails under no_grad on a slice of the learned position table, as decoding
    # runs it; count_flops gives what the stock counter gives with gradients on.
    model = aiayn.build("gpt-tiny").eval()
    ids = torch.randint(0, 256, (2, 6))
    with FlopCounterMode(display=False, custom_mapping=KERNEL_FLOPS) as stock:
        model(ids)
    with torch.no_grad():
        assert count_flops(lambda: model(ids)) == stock.get_total_flops() > 0
    assert count_flops(lambda: sample(model, ids[:1], 3, temperature=0)) > 0
    x, w = torch.randn(1, 1024), torch.randn(2048, 1024)  # one row by a large matrix: oneDNN's inner product
    assert count_flops(lambda: linear(x, w)) == 2 * 1024 * 2048


def test_peak_memory_is_the_most_held_at_once():
    mib = 2**20

    def three_at_once():
        x, y = torch.ones(mib // 4), torch.ones(mib // 4)  # 1 MiB each
        return (x + y).sum()  # a third MiB while x and y live

    def one_at_a_time():
        for _ in range(3):
            torch.ones(mib // 4).sum()

    assert 3 * mib <= peak_memory(three_at_once) < 3 * mib + 4096
    assert mib <= peak_memory(one_at_a_time) < mib + 4096


def test_the_profilers_own_lines_stay_off_the_terminal(capfd):
    print("before", file=sys.stderr)
    peak_memory(lambda: torch.ones(8).sum())  # kineto writes "USDT: ... profiler_start" to file descriptor 2
    print("after", file=sys.stderr)
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "before" in err and "after" in err


MACHINE = {"cpu": "Test CPU", "cpu_capability": "AVX2", "cores": 2, "threads": 2, "device": "cpu", "python": "3",
           "torch": "2.13", "transformers": "5", "date": "2026-01-02T03:04:05+00:00"}


def fake_result(name, peer_times, rounds=3):
    clock, log = FakeClock(), []
    ours_times = [9, 3, 1, 2, 9] if rounds == 3 else [9] + [1] * rounds + [9]
    r = measure(fake_case(clock, log, {"aiayn": ours_times, "peer": peer_times}),
                Settings(peak_flops=10.0, rounds=rounds, clock=clock))
    r.update(case=name, what=f"what {name} measures", machine=MACHINE, matmul_peak_flops=1e11, quick=False)
    return r


def test_results_files_and_the_page_made_from_them(tmp_path):
    results, docs = tmp_path / "results", tmp_path / "docs" / "benchmarks.md"
    for name, peer_times in (("fast", [9, 6, 4, 2, 9]), ("slow", [9, 1, 1, 1, 9])):
        r = fake_result(name, peer_times)
        path = write_result(r, results)
        saved = json.loads(path.read_text())
        assert path == results / f"{name}.json" and saved["schema"] == SCHEMA
        assert saved["peers"]["peer"] == r["peers"]["peer"] and saved["sides"] == r["sides"]
    (results / "other.json").write_text('{"not": "ours"}')  # another benchmark's file: skipped
    write_result({"case": "gpu", "kind": "gpu", "results": {}}, results)  # gpu.py's: not on the page
    write_report(results, docs)
    page_text = docs.read_text()
    assert [r["case"] for r in read_results(results)] == ["fast", "slow"]
    rows = [line for line in page_text.splitlines() if line.startswith("| `")]
    assert len(rows) == 2
    # the median and, in brackets, the quartiles of the rounds (1, 2, 4), not the lowest and highest
    assert "`fast` (3 rounds)" in rows[0] and "2.00x (1.50–3.00)" in rows[0] and "≥ 1.50x, MFU ≥ 80%" in rows[0]
    # three rounds: their lower quartile would clear the target in one row and miss it in the other, but so few
    # rounds judge neither (a target is judged on MIN_ROUNDS or more)
    assert fake_result("fast", [9, 6, 4, 2, 9])["peers"]["peer"]["met"] is True
    assert "| too few rounds to judge |" in rows[0] and "| met |" not in rows[0]
    assert "`slow`" in rows[1] and "0.50x" in rows[1] and "| too few rounds to judge |" in rows[1]
    assert "2 tokens/s" in rows[0] and "100% / 50%" in rows[0]  # ours' throughput; MFU of each side
    assert "Test CPU (AVX2), 2 cores, 2 threads; torch 2.13, transformers 5; matmul peak 100 GFLOP/s" in page_text
    assert "- `fast`: what fast measures." in page_text and "Measured 2026-01-02." in page_text
    assert "fewer than 7 rounds" in page_text and "**lower" in page_text and "AVX-512" in page_text
    # no absolute path: the results folder and the plot relative to the page (no repository here), and the
    # command that regenerates the page, run from the page's folder
    assert str(tmp_path) not in page_text and "from `../results/*.json`" in page_text
    assert "`aiayn bench --out ../results --docs benchmarks.md`" in page_text
    (results / "slow.json").unlink()
    write_report(results, docs)
    assert "`slow`" not in docs.read_text() and "`fast`" in docs.read_text()
    r = fake_result("seven", [9] + [1.6] * 7 + [9], rounds=7)
    write_result(r, results)
    write_result(fake_result("seven-slow", [9] + [0.5] * 7 + [9], rounds=7), results)
    rows = [line for line in page(results, docs).splitlines() if line.startswith("| `seven")]
    assert rows[0].startswith("| `seven` | ") and "| met |" in rows[0]  # seven rounds: no mark, and judged
    assert rows[1].startswith("| `seven-slow` | ") and "**missed**" in rows[1]


def test_an_older_results_file_renders_with_its_quartiles_and_met_decided_again(tmp_path):
    # schema 1 kept the per-round ratios and decided met by their median; the page re-decides by the quartile
    r = fake_result("old", [9, 4.8, 1.6, 2.2, 9])  # ratios 1.6, 1.6, 1.1: median 1.6, lower quartile 1.35
    ratios = r["peers"]["peer"]["ratios"]
    assert ratios == pytest.approx([1.6, 1.6, 1.1]) and r["peers"]["peer"]["ratio_q1"] == pytest.approx(1.35)
    old = json.loads(json.dumps(r))
    for side in old["sides"].values():
        del side["mfu_q1"], side["mfu_q3"]
    for peer in old["peers"].values():
        del peer["ratio_q1"], peer["ratio_q3"]
        peer["met"] = True  # the median rule: ratio 1.6 >= 1.5 (and MFU 1.0 >= 0.8)
    results = tmp_path / "results"
    results.mkdir()
    (results / "old.json").write_text(json.dumps({"schema": "aiayn-bench/1", **old}))
    (results / "future.json").write_text(json.dumps({"schema": "aiayn-bench/99", **old, "case": "future"}))
    [read] = read_results(results)  # schema 1 read, an unknown one skipped
    assert read["peers"]["peer"]["ratio_q1"] == pytest.approx(1.35)
    assert read["sides"]["aiayn"]["mfu_q1"] == pytest.approx(r["sides"]["aiayn"]["mfu_q1"])
    assert read["peers"]["peer"]["met"] is False  # 1.35 < 1.5: missed under the quartile rule
    row = next(line for line in page(results, tmp_path / "benchmarks.md").splitlines() if "`old`" in line)
    assert "1.60x (1.35–1.60)" in row and "too few rounds to judge" in row  # 3 rounds: met is not shown as met


def test_the_committed_page_is_what_the_report_makes_of_the_committed_results():
    results, docs = ROOT / "benchmarks" / "results", ROOT / "docs" / "benchmarks.md"
    if not docs.is_file() or not results.is_dir():
        pytest.skip("docs/ and benchmarks/ are not next to the tests")
    text = page(results, docs)
    regenerate = "regenerate it: aiayn bench --report-only --out benchmarks/results --docs docs/benchmarks.md"
    assert docs.read_text(encoding="utf-8") == text, regenerate
    assert "from `benchmarks/results/*.json`" in text and "![scaling](../benchmarks/results/scaling.png)" in text
    assert "`aiayn bench --out benchmarks/results --docs docs/benchmarks.md`" in text  # from the repository root
    assert str(ROOT) not in text and str(Path.home()) not in text  # no absolute path
    assert any(line.startswith("| `") for line in text.splitlines())  # the committed results do render


COMPILING = {name for name in CASES if name.endswith("-compiled")}  # minutes of compiling: slow (the
# compiled step's own test, tests/decoding/test_static.py, is the short version)


@hf
@pytest.mark.parity
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in COMPILING else n for n in CASES])
def test_every_case_builds_at_toy_sizes_and_ours_computes_what_the_peer_computes(name):
    torch.manual_seed(0)
    try:
        case = CASES[name](True, CPU)
    except Unavailable as e:  # llama.cpp, which the test extra does not build (benchmarks/llamacpp.sh does)
        pytest.skip(str(e))
    assert case.sides[0].name == "aiayn" and len(case.sides) >= 2 and case.units > 0
    assert set(case.checks) == {s.name for s in case.sides[1:]}, "every peer is checked"
    for peer, check in case.checks.items():
        assert check["ok"], (peer, check)
    r = measure(case, Settings(peak_flops=1e10, rounds=1, warmup=0))
    assert r["flops"] > 0
    for side in r["sides"].values():
        assert side["peak_memory_bytes"] > 0 and side["throughput"] > 0


@hf
@pytest.mark.parity
def test_the_checks_compare_what_they_say():
    case = CASES["train-small"](True, CPU)
    nn_check, marian_check = case.checks["torch.nn.Transformer"], case.checks["MarianMTModel"]
    assert nn_check["max_abs_diff"] < 1e-4 and marian_check["max_abs_diff"] < 1e-4 and marian_check["same_config"]
    greedy = CASES["decode-greedy"](True, CPU)
    check = greedy.checks["MarianMTModel.generate"]
    assert check["shape"] == [greedy.extra["batch"], greedy.extra["new_tokens"]]  # both ran every step
    gpt2 = CASES["gpt2-generate"](True, CPU)
    extra = gpt2.extra
    assert extra["ceiling_tokens_per_s"] == pytest.approx(extra["memory_bandwidth_bytes_per_s"]
                                                          / extra["weight_bytes_per_token"])
    train = CASES["gpt2-train"](True, CPU).checks["GPT2LMHeadModel"]
    assert len(train["gradients"]) == 2 and all(g["ok"] for g in train["gradients"])


@hf
@pytest.mark.parity
def test_run_bench_writes_results_a_plot_and_the_page(tmp_path):
    results, docs = tmp_path / "results", tmp_path / "docs" / "benchmarks.md"
    out = run_bench(["decode-greedy", "scaling"], out=results, rounds=2, threads=1, quick=True, docs=docs, echo=None)
    assert set(out) == {"decode-greedy", "scaling"}
    greedy = out["decode-greedy"]  # each side timed in a worker process of its own (the default)
    pids = greedy["processes"]
    assert greedy["apart"] and set(pids) == set(greedy["sides"]) and len(set(pids.values())) == 2
    assert os.getpid() not in pids.values()
    for side in greedy["sides"].values():
        assert len(side["seconds"]) == 2 and all(t > 0 for t in side["seconds"]) and side["peak_memory_bytes"] > 0
    peer = greedy["peers"]["MarianMTModel.generate"]
    ours, theirs = (greedy["sides"][s]["seconds"] for s in ("aiayn", "MarianMTModel.generate"))
    assert peer["check"]["ok"] and peer["ratios"] == [p / o for o, p in zip(ours, theirs)]
    assert (results / "decode-greedy.json").is_file() and (results / "scaling.png").stat().st_size > 0
    saved = json.loads((results / "scaling.json").read_text())
    assert saved["quick"] and saved["machine"]["threads"] == 1 and saved["matmul_peak_flops"] > 0
    full = [p["full_flops"] for p in saved["attention"]["points"]]
    windowed = [p["windowed_flops"] for p in saved["attention"]["points"]]
    assert full[-1] > windowed[-1] and full[-1] / full[-2] > windowed[-1] / windowed[-2]  # T^2 against T W
    page = docs.read_text()
    assert "`decode-greedy` (quick)" in page and "## Scaling (quick)" in page
    assert "![scaling](../results/scaling.png)" in page
    with pytest.raises(ValueError, match="did you mean 'decode-beam'"):
        run_bench(["decode-bean"], out=results, echo=None)
    assert NAMES[-1] == "scaling" and set(NAMES[:-1]) == set(CASES)


def test_every_case_is_where_the_table_of_cases_says():
    # the table in aiayn.benchmark.cases names each case's module: a case is found by its name there
    import aiayn.benchmark.cases as cases

    rows = [line.split() for line in cases.__doc__.splitlines() if line[:4] == "    " and line.split()
            and line.split()[0] in CASES]
    assert sorted(row[0] for row in rows) == sorted(CASES)
    for row in rows:
        assert CASES[row[0]].__module__ == f"aiayn.benchmark.cases.{row[-1]}", row[0]


def test_weight_bytes_per_token_reads_one_row_of_the_position_table_and_of_an_untied_token_table():
    from aiayn.benchmark.cases.generation import weight_bytes_per_token
    from aiayn.models.gpt import GPT, PRESETS

    gpt2 = GPT(dataclasses.replace(PRESETS["gpt-tiny"], vocab_size=50, max_len=16))  # tied, learned positions
    c, n_params = 128, sum(p.numel() for p in gpt2.parameters())  # a tied table counted once
    assert weight_bytes_per_token(gpt2) == 4 * (n_params - 16 * c)
    llama = GPT(dataclasses.replace(PRESETS["llama-tiny"], vocab_size=50))  # untied, rotary positions
    n_params = sum(p.numel() for p in llama.parameters())
    assert weight_bytes_per_token(llama) == 4 * (n_params - 50 * c)


def test_the_terminal_line_judges_a_target_only_on_seven_rounds_or_more():
    from aiayn.benchmark.run import summary

    assert "2.00x peer, target too few rounds to judge" in summary(fake_result("few", [9, 6, 4, 2, 9]))
    assert "1.60x peer, target met" in summary(fake_result("seven", [9] + [1.6] * 7 + [9], rounds=7))
    assert "0.50x peer, target missed" in summary(fake_result("slow", [9] + [0.5] * 7 + [9], rounds=7))
