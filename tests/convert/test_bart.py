"""Our Transformer with BART's settings against Hugging Face's BART (random weights from a config, no download; a tiny
one taught to copy for decoding)."""

import pytest
import torch

import aiayn
from aiayn.decoding import greedy

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

PAD, EOS = 1, 2


def bart(**overrides):
    cfg = {"vocab_size": 64, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
           "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 40,
           "init_std": 0.2, "forced_eos_token_id": None, "forced_bos_token_id": None}
    cfg.update(overrides)
    torch.manual_seed(0)
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(**cfg)).eval()
    with torch.no_grad():  # every bias and layer norm away from its 0/1 start (Hugging Face zeroes the biases),
        for name, p in hf.named_parameters():  # so a dropped or mixed-up one shows
            if "layer_norm" in name or "layernorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return hf


@pytest.fixture(scope="module")
def trained():
    """A tiny BART taught for a few seconds to copy its input, so greedy decoding is not degenerate: outputs
    depend on the source and end at ``</s>`` at different steps, where a random one runs every row to max_len."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a module fixture runs before the one_thread fixture; see conftest.py
    hf = bart(init_std=0.1, dropout=0.0)
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.Adam(hf.parameters(), lr=3e-3)
    hf.train()
    for _ in range(150):
        n = int(torch.randint(1, 6, (1,), generator=gen))
        src = torch.cat([torch.zeros(16, 1, dtype=torch.long), torch.randint(3, 40, (16, n), generator=gen),
                         torch.full((16, 1), EOS)], dim=1)  # <s> tokens </s>
        loss = hf(input_ids=src, labels=src).loss  # decoder input: the labels shifted right after </s>
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.set_num_threads(threads)
    return hf.eval()


def batch():
    src = torch.tensor([[0, 9, 12, 7, 3, EOS], [0, 4, EOS, PAD, PAD, PAD]])
    tgt = torch.tensor([[EOS, 0, 9, 2, 17], [EOS, 0, 3, PAD, PAD]])
    real = torch.arange(tgt.size(1)) < torch.tensor([[5], [3]])  # targets of 5 and 3 positions, padded at the end
    return src, tgt, real


@pytest.mark.parametrize("overrides, logits_bias", [
    ({}, False),
    ({"activation_function": "relu", "d_model": 40, "encoder_attention_heads": 5, "decoder_attention_heads": 5,
      "scale_embedding": True}, True),
], ids=["bart", "relu-five-heads-scaled-logits-bias"])
def test_logits_equal_bart(overrides, logits_bias):
    hf = bart(**overrides)
    if logits_bias:  # a zero buffer in BART's checkpoints (our preset has no output bias); kept when it is not
        hf.final_logits_bias.normal_(0, 0.5)
    ours = aiayn.from_hf(hf)
    src, tgt, real = batch()
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt,
                      decoder_attention_mask=real.long()).logits
        torch.testing.assert_close(ours(src, tgt)[real], expected[real], atol=1e-4, rtol=1e-4)
    assert ours.cfg.positional_offset == 2 and ours.cfg.embed_norm and ours.cfg.output_bias == logits_bias


def test_greedy_equals_generate(trained):
    hf, max_len = trained, 10
    ours = aiayn.from_hf(hf)
    src, _, _ = batch()
    expected = hf.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=1, do_sample=False,
                           max_new_tokens=max_len, bad_words_ids=[[PAD]])[:, 1:]  # drop the start token
    ends = [row.index(EOS) if EOS in row else max_len for row in expected.tolist()]
    # not vacuous: one row ends before max_len while the other goes on, so padding after </s> is compared
    assert min(ends) < max_len - 1 and ends[0] != ends[1], f"rows should end at different steps: {expected}"
    got = greedy(ours, src, max_len=max_len)
    assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("name, count", [("bart-base", 139_420_416), ("bart-large", 406_291_456)])
def test_preset_parameter_counts(name, count):
    with torch.device("meta"):
        assert aiayn.count_parameters(aiayn.build(name)) == count
