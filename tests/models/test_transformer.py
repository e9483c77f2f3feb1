import dataclasses

import pytest
import torch
from torch import nn

import aiayn
from aiayn.models.transformer import Transformer, TransformerConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

PAD = 0


def tiny(**kw):
    base = {"src_vocab_size": 23, "tgt_vocab_size": 19, "d_model": 32, "n_heads": 4, "n_encoder_layers": 2,
            "n_decoder_layers": 2, "d_ff": 64, "share_embeddings": False, "dropout": 0.1}
    return aiayn.build(TransformerConfig(**{**base, **kw})).eval()


def torch_reference(model: Transformer) -> nn.Transformer:
    """torch.nn.Transformer of the same sizes, its biases and LayerNorms moved off their 0/1 start (our init
    zeroes every bias, so a dropped or misplaced bias would otherwise change nothing), then copied into
    ``model`` so both compute with the same weights."""
    cfg = model.cfg
    ref = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff,
                         dropout=0.0, activation="relu", batch_first=True, norm_first=cfg.norm_first).eval()
    if not cfg.norm_first:  # the paper's post-norm stack ends normalised; nn.Transformer adds one more norm
        ref.encoder.norm = ref.decoder.norm = None
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
        for ours, theirs in ((model.encoder, ref.encoder), (model.decoder, ref.decoder)):
            mine, their = ours.state_dict(), theirs.state_dict()
            renamed = {name: name.replace("self_attn.in_proj.", "self_attn.in_proj_")
                       .replace("cross_attn.in_proj.", "multihead_attn.in_proj_")
                       .replace("cross_attn.", "multihead_attn.")
                       .replace("ff.fc1", "linear1").replace("ff.fc2", "linear2") for name in mine}
            assert sorted(renamed.values()) == sorted(their), "every weight maps to one of nn.Transformer's"
            for name, p in mine.items():
                p.copy_(their[renamed[name]])
    return ref


def batch():
    """Sources and targets of different lengths, padded at the end."""
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [5, 9, 2, PAD, PAD, PAD], [7, 7, 3, 4, 2, PAD]])
    tgt = torch.tensor([[1, 4, 5, 6, 7], [1, 8, PAD, PAD, PAD], [1, 3, 9, 5, PAD]])
    return src, tgt


@pytest.mark.parametrize("norm_first", [False, True])
def test_parity_with_torch_transformer_with_padding(norm_first):
    model = tiny(norm_first=norm_first)
    ref = torch_reference(model)
    assert all(p.abs().min() > 0 for name, p in model.named_parameters() if "generator" not in name and
               (name.endswith("bias") or "norm" in name)), "a zero bias would hide a bias that is never added"
    src, tgt = batch()
    src_real, tgt_real = src != PAD, tgt != PAD
    with torch.no_grad():
        # encoder
        memory = model.encode(src)
        ref_memory = ref.encoder(model.src_embed(src), src_key_padding_mask=src == PAD)
        torch.testing.assert_close(memory[src_real], ref_memory[src_real], atol=1e-5, rtol=1e-5)
        # decoder, given the same memory
        logits = model.decode(tgt, memory, src)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1)) == float("-inf")
        ref_dec = ref.decoder(model.tgt_embed(tgt), memory, tgt_mask=causal, tgt_key_padding_mask=tgt == PAD,
                              memory_key_padding_mask=src == PAD)
        torch.testing.assert_close(logits[tgt_real], model.generator(ref_dec)[tgt_real], atol=1e-5, rtol=1e-5)
        # whole model
        ref_out = ref(model.src_embed(src), model.tgt_embed(tgt), tgt_mask=causal, src_key_padding_mask=src == PAD,
                      tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
        torch.testing.assert_close(model(src, tgt)[tgt_real], model.generator(ref_out)[tgt_real], atol=1e-5, rtol=1e-5)


def test_a_future_target_token_never_changes_earlier_logits():
    model = tiny()
    src, tgt = batch()
    base = model(src, tgt)
    for t in range(1, tgt.size(1)):
        changed = tgt.clone()
        changed[0, t] = 11
        out = model(src, changed)
        torch.testing.assert_close(out[0, :t], base[0, :t], atol=1e-6, rtol=1e-5)
        assert not torch.allclose(out[0, t:], base[0, t:])


def test_padding_a_source_changes_no_output_at_real_positions():
    model = tiny()
    src = torch.tensor([[5, 6, 7, 2]])
    tgt = torch.tensor([[1, 4, 5]])
    padded = torch.cat([src, torch.full((1, 5), PAD)], dim=1)
    torch.testing.assert_close(model.encode(padded)[:, :4], model.encode(src), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-6, rtol=1e-5)
    # padding the target (right side) leaves the real positions alone too
    torch.testing.assert_close(model(src, torch.tensor([[1, 4, 5, PAD, PAD]]))[:, :3], model(src, tgt), atol=1e-6,
                               rtol=1e-5)


def test_training_mode_uses_dropout_and_eval_is_deterministic():
    model = tiny()
    src, tgt = batch()
    torch.testing.assert_close(model(src, tgt), model(src, tgt))
    model.train()
    assert not torch.allclose(model(src, tgt), model(src, tgt))


def test_shared_embeddings_and_tied_output_are_one_tensor():
    model = tiny(src_vocab_size=19, share_embeddings=True, tie_output=True)
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight is model.generator.weight
    untied = tiny(tie_output=False)
    assert untied.generator.weight is not untied.tgt_embed.tokens.weight
    assert aiayn.count_parameters(untied) - aiayn.count_parameters(tiny()) == 19 * 32


@pytest.mark.parametrize("positional", ["sinusoidal", "sinusoidal-concat", "learned"])
def test_every_positional_kind_runs_and_is_causal(positional):
    model = tiny(positional=positional, max_len=16)
    src, tgt = batch()
    out = model(src, tgt)
    changed = tgt.clone()
    changed[0, 3] = 9
    torch.testing.assert_close(model(src, changed)[0, :3], out[0, :3])


def test_paper_parameter_counts():
    # Table 3: big is 213M with the shared 37k vocabulary and tied output projection.
    big = aiayn.analysis.parameter_table(aiayn.preset("transformer-big"))
    assert abs(big["total"] - 213e6) / 213e6 < 0.01
    # Counted by hand for base: embeddings 37000*512; encoder layer 4(512^2+512) + 2*512*2048+2048+512 + 2*1024;
    # decoder layer one more attention and norm; output bias 37000.
    enc = 4 * (512 * 512 + 512) + (2 * 512 * 2048 + 2048 + 512) + 2 * 1024
    dec = enc + 4 * (512 * 512 + 512) + 1024
    assert aiayn.count_parameters(aiayn.build("transformer-base")) == 37000 * 512 + 6 * enc + 6 * dec + 37000
    base = aiayn.preset("transformer-base")
    assert (base.n_encoder_layers, base.d_model, base.d_ff, base.n_heads, base.dropout) == (6, 512, 2048, 8, 0.1)
    assert aiayn.preset("transformer-big").dropout == 0.3


@pytest.mark.parametrize("overrides, error", [
    ({"d_model": 100, "n_heads": 8}, "d_model=100 must be divisible by n_heads=8"),
    ({"dropout": 1.0}, r"dropout=1.0 must be a probability in \[0, 1\)"),
    ({"d_ff": 0}, "d_ff=0 must be a positive integer"),
    ({"src_vocab_size": 10, "tgt_vocab_size": 12}, "share_embeddings=True needs src_vocab_size == tgt_vocab_size"),
    ({"d_modle": 64}, "no field 'd_modle'; did you mean 'd_model'"),
    ({"positional": "rope"}, "positional='rope' must be one of"),
])
def test_bad_configs_name_the_field(overrides, error):
    with pytest.raises(ValueError, match=error):
        aiayn.preset("transformer-base", **overrides)


def test_unknown_preset_suggests_the_closest():
    with pytest.raises(ValueError, match="did you mean 'transformer-base'"):
        aiayn.preset("transformer-bsae")
    assert {"transformer-base", "transformer-big", "transformer-tiny"} <= set(aiayn.presets())


def test_configs_are_frozen():
    cfg = aiayn.preset("transformer-tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 3


def test_mismatched_memory_is_named():
    model = tiny()
    src, tgt = batch()
    with pytest.raises(ValueError, match="memory must be"):
        model.decode(tgt, torch.zeros(2, 3, 32), src)
    with pytest.raises(ValueError, match="same batch size"):
        model(src, tgt[:1])
