"""``benchmarks/gpu.sh`` on a machine where nothing is installed: each stage runs ``${PYTHON:-python3}`` with
``src/`` on ``PYTHONPATH``, writes into ``$OUT``, and a failure ends it with a non-zero status. ``PYTHON`` is a
stub here that notes how it was called, so the script's wiring is checked without a GPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUB = """#!/bin/sh
echo "$PYTHONPATH | $*" >> "$CALLS"
case "$*" in *pytest*) echo "1 failed, 3 passed"; exit "${PYTEST_STATUS:-0}" ;; esac
"""


def gpu_sh(tmp_path: Path, stage: str, pytest_status: int = 0) -> tuple[subprocess.CompletedProcess, list[str]]:
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.touch()
    env = {**os.environ, "PYTHON": str(stub), "OUT": str(tmp_path / "out"), "CALLS": str(calls),
           "PYTEST_STATUS": str(pytest_status), "PYTHONPATH": ""}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh"), stage], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    return done, calls.read_text().splitlines()


def test_every_stage_imports_the_package_from_src_with_the_python_given(tmp_path):
    src, out = str(ROOT / "src"), str(tmp_path / "out")
    for stage, wanted in [("tests", ["-m pytest -m gpu"]), ("eager", [f"benchmarks/gpu.py --steps 20 --out {out}",
                                                                       "-m aiayn bench", f"--out {out}/gpu"]),
                          ("compiled", [f"benchmarks/gpu.py --steps 20 --compile --out {out}/compiled"])]:
        done, calls = gpu_sh(tmp_path, stage)
        assert done.returncode == 0, done.stderr
        assert calls and all(c.split(" | ")[0].split(":")[0] == src for c in calls), calls
        assert "-c import aiayn, torch;" in calls[0]  # the package and torch import first, or the command stops
        for w in wanted:
            assert any(w in c for c in calls[1:]), (stage, w, calls)
        (tmp_path / "calls.txt").unlink()
    assert (tmp_path / "out" / "gpu-tests.txt").is_file()


def test_failed_gpu_tests_fail_the_command(tmp_path):
    done, _ = gpu_sh(tmp_path, "tests", pytest_status=1)
    assert done.returncode == 1
    assert "1 failed" in done.stdout and "gpu-tests.txt" in done.stderr


@pytest.mark.parametrize("stage", ["", "all"])
def test_a_stage_must_be_named(tmp_path, stage):
    done, calls = gpu_sh(tmp_path, stage)
    assert done.returncode == 2 and "tests|eager|compiled" in done.stderr and calls == []
