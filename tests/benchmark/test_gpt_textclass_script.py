"""``benchmarks/gpt_vs_bert_textclass.py --quick`` runs as a user runs it (a subprocess, one thread, its output in a
temporary folder) and writes what the README's table is made from: both families from both starts, each with a
rate chosen among those tried, test confusion matrices that count the test split."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared import DATA

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpt_vs_bert_textclass.py"

pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/ is not next to the tests")


def test_quick_run_compares_gpt_and_bert_from_scratch_and_pre_trained(tmp_path):
    data = DATA / "chinese-reviews-sentiment"
    if not data.is_dir():
        pytest.skip(f"needs the shared data set {data}")
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--data", str(data), "--out", str(tmp_path / "out")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    result = json.loads((tmp_path / "out" / "gpt_vs_bert_textclass.json").read_text())
    split = result["split"]
    assert result["data"]["kept"] == split["train"] + split["validation"] + split["test"]
    assert set(result["pretraining"]) == {"bert", "gpt"}
    for key in ("scratch_bert", "scratch_gpt", "pretrained_bert", "pretrained_gpt"):
        row = result[key]
        assert row["lr"] in [t["lr"] for t in row["tried"]] and row["parameters"] > 0
        assert row["tried"][0]["val_accuracy"] == max(t["val_accuracy"] for t in row["tried"])  # one rate in quick
        for r in row["runs"]:
            assert sum(map(sum, r["test_confusion"])) == split["test"]
            assert 0 <= r["test_accuracy"] <= 1
