"""Every ``aiayn viz`` picture is written for a tiny model, and the numbers drawn are the right ones."""

import pytest
import torch

import aiayn
from aiayn.cli import main
from aiayn.data import CharTokenizer
from aiayn.layers.vision import shifted_window_mask, window_partition
from aiayn.training import label_smoothed_loss
from aiayn.viz import attention_weights, encoding_similarity, smoothed_target
from aiayn.viz.masks import shift_regions

PNG = b"\x89PNG\r\n\x1a\n"


def written(path):
    assert path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG, path
    return True


@pytest.mark.parametrize("what", ["positional", "masks", "lookahead", "swin-windows", "schedule", "smoothing"])
def test_viz_writes_a_png(what, tmp_path, capsys):
    assert main(["viz", what, "--out", str(tmp_path), "--d-model", "32", "--positions", "20"]) == 0
    assert written(tmp_path / f"{what}.png") and "wrote" in capsys.readouterr().out


def test_viz_complexity_writes_a_png(tmp_path):
    assert main(["viz", "complexity", "--out", str(tmp_path), "--sides", "7", "14", "--window", "7"]) == 0
    assert written(tmp_path / "complexity.png")


@pytest.fixture
def tiny_run(tmp_path):
    texts = ["hello world", "attention is all you need"]
    src_tok = tgt_tok = CharTokenizer.train(texts)
    model = aiayn.build("transformer-tiny", src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size,
                        n_encoder_layers=2, n_decoder_layers=1, max_len=64)
    run = tmp_path / "run"
    aiayn.save(model, run)
    src_tok.save(run / "src_tokenizer.json")
    tgt_tok.save(run / "tgt_tokenizer.json")
    return run


def test_viz_attention_draws_every_kind_for_a_run(tiny_run, tmp_path):
    out = tmp_path / "pictures"
    assert main(["viz", "attention", "--run", str(tiny_run), "--text", "hello", "--target", "hi",
                 "--out", str(out)]) == 0
    for name in ("attention-encoder.png", "attention-decoder.png", "attention-cross.png"):
        assert written(out / name)


def test_attention_weights_by_kind_and_layer(tiny_run):
    model = aiayn.load(tiny_run).eval()
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 5, 6]])
    w = attention_weights(model, lambda: model(src, tgt))
    assert [len(w[k]) for k in w] == [2, 1, 1]  # two encoder layers, one decoder layer
    assert w["encoder self-attention"][0].shape == (4, 4, 4)  # (H, S, S)
    assert w["decoder self-attention"][0].shape == (4, 3, 3)
    assert w["encoder-decoder attention"][0].shape == (4, 3, 4)  # (H, T, S)
    assert torch.all(w["decoder self-attention"][0].triu(1) == 0)  # causal
    torch.testing.assert_close(w["encoder-decoder attention"][0].sum(-1), torch.ones(4, 3))


def test_viz_attention_needs_a_run_and_a_sentence(capsys):
    assert main(["viz", "attention"]) == 2
    assert "needs --run" in capsys.readouterr().err


def test_encoding_dot_products_depend_on_the_offset_alone():
    sim = encoding_similarity(40, 16)  # (T, T)
    for k in range(5):
        diagonal = torch.diagonal(sim, k)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))
    assert torch.allclose(torch.diagonal(sim), torch.full((40,), 8.0, dtype=sim.dtype))  # C/2 at offset 0
    torch.testing.assert_close(sim, encoding_similarity(40, 16, layout="concat"))


def test_smoothed_target_is_the_distribution_the_loss_uses():
    v, pad, eps = 9, 0, 0.1
    logits, target = torch.randn(6, v), torch.tensor([1, 4, 8, 3, 2, 5])
    q = torch.stack([smoothed_target(v, int(t), pad, eps) for t in target])  # (N, V)
    assert torch.allclose(q.sum(-1), torch.ones(6)) and torch.all(q[:, pad] == 0)
    expected = -(q * logits.log_softmax(-1)).sum()
    loss, _, n = label_smoothed_loss(logits, target, pad_id=pad, epsilon=eps)
    assert n == 6
    torch.testing.assert_close(loss, expected)


def test_shift_regions_are_what_the_swin_mask_compares():
    labels = shift_regions(4, 6, window=2, shift=1)  # (H, W)
    by_window = window_partition(labels[None, :, :, None], 2)[..., 0]  # (nW, M*M)
    torch.testing.assert_close(by_window[:, :, None] == by_window[:, None, :], shifted_window_mask(4, 6, 2, 1))
