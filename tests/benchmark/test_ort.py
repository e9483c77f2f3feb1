"""The onnxruntime cases at toy sizes: ours exported to ONNX and decoded greedily through onnxruntime makes ours' tokens
(translation, GPT-2 generation), both sides taking every step; the page reports no memory for onnxruntime's side;
without onnxruntime (or off the CPU) ``aiayn bench`` skips the cases and says how to install it. No time is
asserted."""

import sys

import pytest
import torch

from aiayn.benchmark import run_bench
from aiayn.benchmark.cases import CASES
from aiayn.benchmark.harness import Settings, Unavailable, machine, measure, write_result
from aiayn.benchmark.report import page

pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")  # pip install "aiayn[bench]" (the test extra has it)

pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

CPU = torch.device("cpu")
NAMES = ["decode-greedy-ort", "gpt2-generate-ort"]


@pytest.fixture(scope="module")
def cases():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a module fixture runs before the one_thread fixture; see conftest.py
    try:
        return {name: CASES[name](True, CPU) for name in NAMES}
    finally:
        torch.set_num_threads(threads)


# exporting the cases' graphs takes half a minute; test_harness.py builds every case at toy sizes in the short run
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_onnxruntime_makes_ours_tokens_taking_every_step(cases, name):
    case = cases[name]
    assert [s.name for s in case.sides] == ["aiayn", "onnxruntime"] and not case.sides[1].torch_memory
    ours = case.sides[0].run()
    assert ours.shape == (case.units // case.extra["new_tokens"], case.extra["new_tokens"])
    assert torch.equal(case.sides[1].run(), ours)
    assert case.checks["onnxruntime"]["ok"], case.checks["onnxruntime"]
    assert case.target is not None and case.target.ratio == 1.0
    assert "onnxruntime" in case.what and "opset" in case.what


@pytest.mark.slow
def test_the_page_reports_no_memory_for_onnxruntime(cases, tmp_path):
    r = measure(cases["decode-greedy-ort"], Settings(peak_flops=1e10, rounds=1, warmup=0))
    assert r["sides"]["aiayn"]["torch_memory"] and not r["sides"]["onnxruntime"]["torch_memory"]
    r.update(quick=True, machine=machine(), matmul_peak_flops=1e10)  # as run_bench adds them
    write_result(r, tmp_path)
    row = next(line for line in page(tmp_path, tmp_path / "benchmarks.md").splitlines()
               if line.startswith("| `decode-greedy-ort`"))
    assert row.endswith(" MiB / n/a |")


def test_without_onnxruntime_or_off_the_cpu_the_cases_are_skipped_saying_why(tmp_path, monkeypatch):
    with pytest.raises(Unavailable, match="CPU only"):
        CASES["decode-greedy-ort"](True, torch.device("cuda"))  # refused before anything touches the device
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now raises ImportError
    with pytest.raises(Unavailable, match=r'pip install "aiayn\[bench\]"'):
        CASES["gpt2-generate-ort"](True, CPU)
    said = []
    out = run_bench(["decode-greedy-ort"], out=tmp_path, rounds=1, quick=True, docs=None, apart=False,
                    echo=said.append)  # in this process: the patched import is seen
    assert out == {} and not list(tmp_path.glob("*.json"))
    assert said[-1].startswith("decode-greedy-ort: skipped: needs onnxruntime")
