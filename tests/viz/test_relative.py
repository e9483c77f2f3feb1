"""aiayn viz relative: a Transformer-XL's mean attention by distance, against a plain loop over the recorded
weights, and drawn from a run through the command line."""

import subprocess
import sys

import pytest
import torch

from aiayn.layers.attention import record_attention
from aiayn.models.transfo_xl import TransfoXL, TransfoXLConfig
from aiayn.viz.files import draw_relative
from aiayn.viz.relative import attention_by_distance


def test_the_mean_weight_by_distance_is_the_loops_over_segments_after_the_memory_fills():
    torch.manual_seed(0)
    model = TransfoXL(TransfoXLConfig(vocab_size=31, d_model=16, n_heads=2, n_layers=2, d_ff=24, cutoffs=(),
                                      div_val=1, mem_len=6, clamp_len=None, same_length=False, dropout=0.0)).eval()
    block, ids = 4, torch.randint(0, 31, (1, 18))
    got = attention_by_distance(model, ids, block)  # (L, H, 6 + 4)
    sums, counts = torch.zeros(2, 2, 10, dtype=torch.float64), torch.zeros(10, dtype=torch.float64)
    memory = model.new_memory()
    with torch.no_grad():
        for at in range(0, 18 - block + 1, block):
            full = memory.length == 6
            with record_attention(model) as rec:
                model(ids[:, at : at + block], memory)
            if not full:
                continue
            for layer in range(2):
                w = rec[f"layers.{layer}.self_attn"][0][0]  # (H, T, S)
                for i in range(block):
                    for j in range(6 + block):
                        d = 6 + i - j
                        if d < 0:
                            continue
                        sums[layer, :, d] += w[:, i, j].double()
                        if layer == 0:
                            counts[d] += 1
    torch.testing.assert_close(got, (sums / counts).float())
    # every query's weights sum to one over the keys it sees: the counts bring back one per query and head
    assert torch.allclose((got.double() * counts).sum(-1), torch.full((2, 2), 2 * block, dtype=torch.float64))
    with pytest.raises(ValueError, match="fill the memory"):
        attention_by_distance(model, ids[:, :8], block)


def test_viz_relative_draws_a_transformer_xl_run(tmp_path):
    from aiayn import recipes
    from aiayn.data import date_lines

    text = tmp_path / "text.txt"
    text.write_text("\n".join(date_lines(200, seed=0)) + "\n")
    result = recipes.train("lm", data=str(text), tokenizer="char", preset="transfo-xl-char", steps=2, warmup=1,
                           block=16, batch_size=4, model={"d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32,
                                                          "mem_len": 16}, out=str(tmp_path), progress=False,
                           verbose=False)
    out = tmp_path / "relative.png"
    done = subprocess.run([sys.executable, "-m", "aiayn", "viz", "relative", "--run", str(result["run"]), "--text",
                           str(text), "--out", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 10_000
    inline = text.read_text()[:3000]  # the text itself, far too long for a file name
    assert draw_relative(result["run"], inline, tmp_path / "inline.png").stat().st_size > 10_000
    gpt = recipes.train("lm", steps=1, warmup=1, block=16, n_train=50, n_test=5, out=str(tmp_path / "gpt"),
                        model={"d_model": 16, "n_heads": 2, "n_layers": 1}, progress=False, verbose=False)
    with pytest.raises(ValueError, match="with a memory"):
        draw_relative(gpt["run"], str(text), out)
