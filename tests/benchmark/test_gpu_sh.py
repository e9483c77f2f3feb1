"""``benchmarks/gpu.sh``, the one command a lent GPU runs, on a machine without one: ``PYTHON`` is a stand-in that
notes how it was called (and writes what ``gpu.py`` would), so the script's order, limits and failures are checked
here; and ``benchmarks/gpu.py`` itself at toy sizes on the CPU: a figure written as soon as it is measured, the
training FLOPs counted on the uncompiled model so that the timed step is really compiled."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
STUB = f"""#!/bin/sh
echo "$PYTHONPATH | $*" >> "$CALLS"
case "$1" in -) exec {sys.executable} "$@" ;; esac  # gpu.sh's own few lines of Python: run them
case "$*" in
  *"import aiayn, torch"*) exit "${{CUDA_STATUS:-0}}" ;;
  *"-m pytest"*) echo "1 failed, 3 passed"; exit "${{PYTEST_STATUS:-0}}" ;;
  *"gpu.py decode"*)
    out=$(echo "$*" | sed 's/.*--out //')
    echo '{{"results": {{"hbm_bandwidth": {{"bytes_per_s": 3e12}}}}}}' > "$out/gpu.json"
    sleep "${{DECODE_SLEEP:-0}}" ;;
esac
"""


def gpu_sh(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    full = {**os.environ, "PYTHON": str(stub), "OUT": str(tmp_path / "out"), "CALLS": str(calls), "PYTHONPATH": "",
            **env}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh")], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=120, check=False)
    return done, [c for c in calls.read_text().splitlines() if c]


def test_one_command_runs_every_stage_in_order_and_keeps_the_tests_line_with_the_figures(tmp_path):
    done, calls = gpu_sh(tmp_path)
    assert done.returncode == 0, done.stderr
    src, out = str(ROOT / "src"), str(tmp_path / "out")
    assert all(c.split(" | ")[0].split(":")[0] == src for c in calls), calls  # aiayn from src/, nothing installed
    assert "import aiayn, torch" in calls[0]  # the package, torch and a GPU first, or nothing
    stages = [f"gpu.py decode --out {out}", f"gpu.py train --steps 10 --out {out}", "-m pytest -m gpu",
              f"gpu.py train --steps 10 --compile --out {out}"]
    at = [next(i for i, c in enumerate(calls) if s in c) for s in stages]
    assert at == sorted(at), calls  # the most valuable first
    assert "tests/decoding/test_gpu_decoding.py" in calls[at[2]]
    results = json.loads((tmp_path / "out" / "gpu.json").read_text())["results"]
    assert results["hbm_bandwidth"] == {"bytes_per_s": 3e12}  # the decode stage's figure kept
    assert results["pytest-gpu"] == {"summary": "1 failed, 3 passed"}


def test_without_a_gpu_it_stops_at_once(tmp_path):
    done, calls = gpu_sh(tmp_path, CUDA_STATUS="1")
    assert done.returncode == 3 and "no CUDA device" in done.stderr
    assert len(calls) == 1  # the check alone: no stage ran


def test_a_stage_cut_at_its_limit_keeps_its_figures_and_the_next_stages_run(tmp_path):
    done, calls = gpu_sh(tmp_path, DECODE_S="1", DECODE_SLEEP="20")
    assert done.returncode == 124 and "decode failed (status 124" in done.stderr
    assert any("-m pytest" in c for c in calls) and any("--compile" in c for c in calls)
    assert "hbm_bandwidth" in json.loads((tmp_path / "out" / "gpu.json").read_text())["results"]


def test_failed_gpu_tests_fail_the_command_and_a_spent_budget_skips_what_is_left(tmp_path):
    done, _ = gpu_sh(tmp_path, PYTEST_STATUS="1")
    assert done.returncode == 1 and "tests failed (status 1" in done.stderr
    done, calls = gpu_sh(tmp_path, GPU_S="5")
    assert done.returncode == 0 and "skipped" in done.stderr and not any("gpu.py" in c for c in calls)


def gpu_py():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_figure_is_written_when_measured_so_a_failure_keeps_the_ones_before(tmp_path, monkeypatch):
    gpu = gpu_py()
    assert gpu.main(["decode", "--device", "cpu", "--quick", "--sides", "eager", "--rounds", "1",
                     "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "gpu.json").read_text())["results"]
    eager = results["gpt2-decode-eager"]
    assert results["hbm_bandwidth"]["bytes_per_s"] > 0 and eager["tokens_per_s"] > 0
    assert eager["share_of_bound"] == pytest.approx(
        eager["tokens_per_s"] * eager["weight_bytes_per_token"] / results["hbm_bandwidth"]["bytes_per_s"])

    def broken(*args, **kwargs):
        raise RuntimeError("the device went away")

    monkeypatch.setattr(gpu, "sample", broken)
    (tmp_path / "gpu.json").unlink()
    with pytest.raises(RuntimeError, match="went away"):
        gpu.main(["decode", "--device", "cpu", "--quick", "--sides", "eager", "--out", str(tmp_path)])
    assert list(json.loads((tmp_path / "gpu.json").read_text())["results"]) == ["hbm_bandwidth"]


def test_the_timed_training_step_is_compiled_because_flops_are_counted_on_the_plain_model():
    """Under ``FlopCounterMode`` (a dispatch mode) dynamo runs a compiled frame eagerly and never compiles it after:
    counted on the compiled step, every timed step would be eager code labelled compiled."""
    from torch._dynamo.testing import CompileCounterWithBackend

    import aiayn

    gpu = gpu_py()
    torch.manual_seed(0)
    model = aiayn.build("gpt-tiny", vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16)
    ids = torch.randint(0, 50, (2, 9))
    compiled = CompileCounterWithBackend("eager")
    torch._dynamo.reset()

    def loss(forward, batch):
        return torch.nn.functional.cross_entropy(forward(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())

    step, plain = gpu.training_step(model, loss, ids, torch.device("cpu"), compiled)
    figures = gpu.measure(step, plain, 16, torch.device("cpu"), steps=1, vendor=None, peak=1e9)
    assert figures["flops_per_step"] > 0
    assert compiled.frame_count >= 1  # the timed step ran a graph
    torch._dynamo.reset()


def test_the_last_stage_cut_off_is_no_failure_and_a_zero_limit_skips(tmp_path):
    done, calls = gpu_sh(tmp_path, GPU_S="40", DECODE_S="0", DECODE_SLEEP="60")
    assert "decode skipped" in done.stderr and not any("gpu.py decode" in c for c in calls)
    stub = (tmp_path / "python").read_text().replace('*"gpu.py decode"*)', '*"--compile"*)')
    (tmp_path / "python").write_text(stub)
    full = {**os.environ, "PYTHON": str(tmp_path / "python"), "OUT": str(tmp_path / "out2"),
            "CALLS": str(tmp_path / "calls.txt"), "PYTHONPATH": "", "GPU_S": "16", "DECODE_SLEEP": "60"}
    (tmp_path / "out2").mkdir()
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh")], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "compiled cut off" in done.stderr, done.stderr
