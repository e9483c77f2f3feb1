"""``benchmarks/bart_noising.py --quick`` runs as a user runs it (a subprocess, one thread, its output in a temporary
folder), and writes what the README's table is made from: every noising function scored and ranked (ties share a
rank), a PNG that reads back as a picture."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared import DATA

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bart_noising.py"
NOISES = ["mask", "delete", "infill", "permute", "rotate"]

pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/ is not next to the tests")


def test_quick_run_scores_every_noise_and_draws_the_figure(tmp_path):
    data = DATA / "tinyshakespeare" / "input.txt"
    if not data.is_file():
        pytest.skip(f"needs the shared data set {data}")
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--data", str(data), "--out", str(tmp_path / "out")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]

    results = json.loads((tmp_path / "out" / "bart_noising.json").read_text())
    assert [r["noise"] for r in results["runs"]] == NOISES
    for noise in NOISES:
        row = results["summary"][noise]
        assert set(row["nll_matrix_row"]) == set(NOISES)
        assert all(0 < v < 20 for v in row["nll_matrix_row"].values())  # nats per token, finite
        assert 0 <= row["own_exact"]["mean"] <= 1 and 0 <= row["probe"]["mean"] <= 1
    for ranking in results["ranks"].values():
        assert set(ranking) == set(NOISES) and min(ranking.values()) == 1 and set(ranking.values()) <= {1, 2, 3, 4, 5}
    d = results["documents"]
    assert d["train"] > d["validation"] > 0 and d["test"] > 0

    png = tmp_path / "out" / "bart_noising.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    height, width = matplotlib.image.imread(png).shape[:2]
    assert width > 600 and height > 200
