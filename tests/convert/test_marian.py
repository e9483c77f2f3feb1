"""Our Transformer against Hugging Face's MarianMTModel (random weights from a config, no download)."""

import pytest
import torch

import aiayn
from aiayn.decoding import beam_search, greedy

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

PAD, EOS = 40, 0


def marian(**overrides):
    cfg = {"vocab_size": 41, "d_model": 32, "encoder_layers": 2, "decoder_layers": 3, "encoder_attention_heads": 4,
           "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "activation_function": "swish",
           "scale_embedding": True, "max_position_embeddings": 64, "pad_token_id": PAD, "decoder_start_token_id": PAD,
           "eos_token_id": EOS, "forced_eos_token_id": None, "init_std": 0.3, "dropout": 0.1}
    cfg.update(overrides)
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(transformers.MarianConfig(**cfg)).eval()
    with torch.no_grad():  # every bias, layer norm and the logits bias away from their 0/1 start (Hugging Face
        for name, p in hf.named_parameters():  # zeroes the biases), so a dropped or mixed-up one shows
            if "layer_norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
        hf.final_logits_bias.normal_(0, 0.5)
        hf.final_logits_bias[0, EOS] += 1.5  # some outputs end early, so stopping is compared too
    return hf


def reverser():
    """A tiny Marian taught for a few seconds to reverse its input, so decoding is not degenerate:
    outputs depend on the source and end at different lengths."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a module fixture runs before the one_thread fixture; see conftest.py
    hf = marian(init_std=0.1, dropout=0.0)
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.Adam(hf.parameters(), lr=3e-3)
    hf.train()
    for _ in range(150):
        n = int(torch.randint(3, 7, (1,), generator=gen))
        src = torch.randint(3, 30, (16, n), generator=gen)
        labels = torch.cat([src.flip(1), torch.full((16, 1), EOS)], dim=1)
        loss = hf(input_ids=torch.cat([src, torch.full((16, 1), EOS)], dim=1), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.set_num_threads(threads)
    return hf.eval()


@pytest.fixture(scope="module")
def trained():
    return reverser()


def batch():
    src = torch.tensor([[5, 9, 12, 7, 3, 0], [8, 4, 0, PAD, PAD, PAD], [11, 2, 6, 6, 0, PAD]])
    tgt = torch.tensor([[PAD, 4, 9, 2, 17], [PAD, 3, 3, 8, 1], [PAD, 21, 5, 5, 30]])
    return src, tgt


def pad_to(ids, width):
    """``(B, L)`` ids padded with PAD on the right to ``(B, width)``."""
    return torch.nn.functional.pad(ids, (0, width - ids.size(1)), value=PAD)


def padded_targets():
    """Targets of 5, 2 and 4 positions, padded at the end; ``real`` marks the positions before the padding
    (Marian's first target is the pad token itself, so ``tgt != PAD`` would not say which are real)."""
    tgt = torch.tensor([[PAD, 4, 9, 2, 17], [PAD, 3, PAD, PAD, PAD], [PAD, 21, 5, 5, PAD]])
    real = torch.arange(tgt.size(1)) < torch.tensor([[5], [2], [4]])
    return tgt, real


@pytest.mark.parametrize("overrides", [
    {},
    {"activation_function": "relu", "scale_embedding": False},
    {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 45, "tie_word_embeddings": False},
], ids=["opus-mt", "relu-unscaled", "separate-vocabularies"])
def test_logits_equal_marian(overrides):
    hf = marian(**overrides)
    ours = aiayn.from_hf(hf)
    src, _ = batch()
    tgt, real = padded_targets()
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt,
                      decoder_attention_mask=real.long()).logits
        got = ours(src, tgt)
    torch.testing.assert_close(got[real], expected[real], atol=1e-4, rtol=1e-4)
    assert ours.cfg.bos_id == ours.cfg.pad_id == PAD and ours.cfg.positional == "sinusoidal-concat"


def test_greedy_equals_generate(trained):
    hf = trained
    ours = aiayn.from_hf(hf)
    src, _ = batch()
    expected = hf.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=1, do_sample=False,
                           max_new_tokens=12, bad_words_ids=[[PAD]])[:, 1:]  # drop the start token
    got = greedy(ours, src, max_len=12)
    assert (got == EOS).any(dim=1).sum() >= 1, "the test should include rows that stop early"
    assert got.tolist() == expected[:, : got.size(1)].tolist() and (expected[:, got.size(1):] == PAD).all()


@pytest.mark.parametrize("which", ["trained", "untrained"])
def test_beam_search_equals_generate_with_the_same_length_normalisation(which, request):
    # trained: hypotheses end at different lengths; untrained: none ends, all are cut at max_len
    hf = request.getfixturevalue("trained") if which == "trained" else marian()
    ours = aiayn.from_hf(hf)
    src, _ = batch()
    for alpha in (1.0, 0.6, 0.0):
        expected = hf.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=4, do_sample=False,
                               max_new_tokens=12, length_penalty=alpha, early_stopping="never",
                               bad_words_ids=[[PAD]])[:, 1:]
        got = beam_search(ours, src, beam=4, length_penalty=alpha, max_len=12, normalize="length")
        width = max(got.size(1), expected.size(1))
        assert pad_to(got, width).tolist() == pad_to(expected, width).tolist(), alpha


def test_a_saved_folder_converts_too_and_bad_weights_are_refused(tmp_path):
    hf = marian()
    hf.save_pretrained(tmp_path)
    ours = aiayn.from_hf(tmp_path)
    src, tgt = batch()
    with torch.no_grad():
        torch.testing.assert_close(ours(src, tgt), hf(input_ids=src, attention_mask=(src != PAD).long(),
                                                      decoder_input_ids=tgt).logits, atol=1e-4, rtol=1e-4)
    from aiayn.models.transformer import hf as conv

    config, tensors = hf.config.to_dict(), dict(hf.state_dict())
    with pytest.raises(ValueError, match=r"unexpected keys.*model\.encoder\.extra"):
        conv.convert(config, {**tensors, "model.encoder.extra.weight": torch.zeros(1)})
    del tensors["model.decoder.layers.1.fc2.bias"]
    with pytest.raises(ValueError, match=r"decoder\.layers\.1\.fc2\.bias.*missing"):
        conv.convert(config, tensors)
    with pytest.raises(ValueError, match="model_type 'bogus' cannot be converted"):
        (tmp_path / "config.json").write_text('{"model_type": "bogus"}')
        aiayn.from_hf(tmp_path)
