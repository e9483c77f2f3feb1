"""Our Transformer with BART's settings against Hugging Face's BART (random weights from a config)."""

import pytest
import torch

import aiayn
from aiayn.decoding import greedy

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity

PAD, EOS = 1, 2


def bart(**overrides):
    cfg = dict(vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=40,
               init_std=0.2, forced_eos_token_id=None, forced_bos_token_id=None)
    cfg.update(overrides)
    torch.manual_seed(0)
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(**cfg)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "layer_norm" in name or "layernorm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return hf


def batch():
    src = torch.tensor([[0, 9, 12, 7, 3, EOS], [0, 4, EOS, PAD, PAD, PAD]])
    tgt = torch.tensor([[EOS, 0, 9, 2, 17], [EOS, 0, 3, 8, 11]])
    return src, tgt


@pytest.mark.parametrize("overrides", [{}, {"activation_function": "relu", "d_model": 40, "encoder_attention_heads": 5,
                                            "decoder_attention_heads": 5, "scale_embedding": True}],
                         ids=["bart", "relu-five-heads-scaled"])
def test_logits_equal_bart(overrides):
    hf = bart(**overrides)
    ours = aiayn.from_hf(hf)
    src, tgt = batch()
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits
        torch.testing.assert_close(ours(src, tgt), expected, atol=1e-4, rtol=1e-4)
    assert ours.cfg.positional_offset == 2 and ours.cfg.embed_norm and not ours.cfg.output_bias


def test_greedy_equals_generate():
    hf = bart()
    ours = aiayn.from_hf(hf)
    src, _ = batch()
    expected = hf.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=1, do_sample=False,
                           max_new_tokens=10, bad_words_ids=[[PAD]])[:, 1:]
    got = greedy(ours, src, max_len=10)
    width = max(got.size(1), expected.size(1))
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.size(1)), value=PAD)  # noqa: E731
    assert pad(got).tolist() == pad(expected).tolist()


@pytest.mark.parametrize("name, count", [("bart-base", 139_420_416), ("bart-large", 406_291_456)])
def test_preset_parameter_counts(name, count):
    with torch.device("meta"):
        assert aiayn.count_parameters(aiayn.build(name)) == count
