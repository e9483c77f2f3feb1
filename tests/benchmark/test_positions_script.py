"""``benchmarks/positions.py``: its concatenated-positions embedding against the package's pieces, and a
``--quick`` run of toy size (in a subprocess, on one thread, into a temporary folder) that writes a results
file with every part and a real PNG. No number it measures is asserted: at toy sizes they mean nothing."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aiayn
from aiayn.layers.positional import sinusoidal_encoding
from shared import DATA

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "positions.py"

pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/positions.py is not next to the tests")


def load_script():
    spec = importlib.util.spec_from_file_location("positions_script", SCRIPT)  # it imports only the package
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(*args, cwd):
    env = {**os.environ, "TMPDIR": str(cwd), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


def test_concat_embedding_is_token_dims_then_sinusoidal_dims(one_thread):
    script = load_script()
    emb = script.ConcatEmbedding(10, d_model=16, d_pos=6, max_len=32, dropout=0.0, pad_id=0)
    ids = torch.tensor([[3, 4, 5], [6, 0, 0]])  # (B, T)
    x = emb(ids, start=2)  # (B, T, C)
    assert x.shape == (2, 3, 16)
    torch.testing.assert_close(x[..., :10], emb.tokens(ids) * math.sqrt(16))
    torch.testing.assert_close(x[0, :, 10:], sinusoidal_encoding(3, 6, start=2))  # positions 2, 3, 4
    assert torch.equal(x[1, 1, :10], torch.zeros(10))  # padding's token part is zero
    with pytest.raises(ValueError, match="d_pos"):
        script.ConcatEmbedding(10, d_model=16, d_pos=16, max_len=32, dropout=0.0, pad_id=0)


def test_a_transformer_with_concatenated_positions_decodes_the_same_with_the_cache(one_thread):
    script = load_script()
    cfg = aiayn.preset("transformer-tiny", src_vocab_size=12, tgt_vocab_size=12, d_model=32, n_heads=2, d_ff=64,
                       tie_output=False, share_embeddings=False)
    model = aiayn.build(cfg).eval()
    for side in ("src_embed", "tgt_embed"):
        setattr(model, side, script.ConcatEmbedding(12, 32, 8, cfg.max_len, 0.0, cfg.pad_id))
    src, tgt = torch.tensor([[4, 5, 6, 7, 2]]), torch.tensor([[1, 8, 9, 10, 11]])
    with torch.no_grad():
        full = model(src, tgt)  # (1, T, V)
        memory, cache = model.encode(src), model.new_cache(8)
        steps = torch.cat([model.decode(tgt[:, i : i + 1], memory, src, cache=cache) for i in range(5)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)  # each new token at its own position


def test_swap_and_iso():
    script = load_script()
    assert script.swap("05.03.2019") == "03.05.2019" and script.iso("03.05.2019") == "2019-05-03"


def test_random_abs_cos_matches_sampled_directions():
    script = load_script()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(20000, 64, generator=g), torch.randn(20000, 64, generator=g)
    sampled = torch.nn.functional.cosine_similarity(a, b).abs().mean().item()
    assert abs(script.random_abs_cos(64) - sampled) < 0.003
    assert abs(script.random_abs_cos(512) - math.sqrt(2 / (math.pi * 512))) < 0.001


def check_png(path: Path):
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    h, w = matplotlib.image.imread(path).shape[:2]
    assert h > 200 and w > 300


@pytest.mark.slow
def test_quick_run_of_the_ambiguous_part_and_merge(tmp_path):
    out = tmp_path / "out"
    text = run("--quick", "--parts", "ambiguous", "--out", out, cwd=tmp_path)
    results = json.loads((out / "positions.json").read_text())
    assert {r["positional"] for r in results["ambiguous"]["runs"]} == {"sinusoidal", "none"}
    for r in results["ambiguous"]["runs"]:
        assert r["day_equals_month"]["pairs"] + r["day_differs"]["pairs"] == 16
        assert r["day_differs_with_swaps"]["pairs"] == 2 * r["day_differs"]["pairs"]
        assert 0 <= r["day_differs_with_swaps"]["same_output_for_swap"] <= 1
    assert results["ambiguous"]["bag_of_tokens_ceiling"]["overall"] == pytest.approx(13 / 24, abs=1e-4)
    assert set(results["ambiguous"]["summary"]) == {"sinusoidal", "none"}
    assert "| bag-of-tokens ceiling |" in text
    check_png(out / "positions.png")

    merged = tmp_path / "merged"  # --merge trains nothing: the same runs, summarised and drawn again
    run("--merge", out / "positions.json", "--out", merged, cwd=tmp_path)
    again = json.loads((merged / "positions.json").read_text())
    assert again["ambiguous"] == results["ambiguous"]
    check_png(merged / "positions.png")


@pytest.mark.slow
def test_quick_run_of_the_dates_part(tmp_path):
    out = tmp_path / "out"
    run("--quick", "--parts", "dates", "--out", out, cwd=tmp_path)
    results = json.loads((out / "positions.json").read_text())
    assert {r["positional"] for r in results["dates"]["runs"]} == {"sinusoidal", "learned"}
    assert {r["positional"] for r in results["add_vs_concat"]["runs"]} == {"sinusoidal", "concat"}
    params = {r["positional"]: r["params"] for r in results["add_vs_concat"]["runs"]}
    assert params["concat"] != params["sinusoidal"]  # narrower token tables, an untied output
    assert all(0 <= c["mean_abs_cos"] <= 1 for c in results["add_vs_concat"]["cosines"])
    check_png(out / "positions.png")


@pytest.mark.slow
def test_quick_multi30k_part(tmp_path):
    if not (DATA / "multi30k").is_dir():
        pytest.skip(f"needs the shared data set {DATA / 'multi30k'}")
    out = tmp_path / "out"
    run("--quick", "--parts", "multi30k", "--data-dir", DATA / "multi30k", "--out", out, cwd=tmp_path)
    results = json.loads((out / "positions.json").read_text())
    assert {r["positional"] for r in results["multi30k"]["runs"]} == {"sinusoidal", "learned"}
    assert all(r["test_bleu"] >= 0 for r in results["multi30k"]["runs"])
    check_png(out / "positions.png")
