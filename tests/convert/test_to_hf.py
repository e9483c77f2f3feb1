"""Our models -> Hugging Face folders (``aiayn.convert.to_hf.to_hf``), loaded by ``transformers`` and compared
output by output, written as ``save_pretrained`` writes them, and read back by ``aiayn.from_hf`` unchanged.
Models are tiny, with random weights built here: ours from presets (every bias, norm and statistic moved
off its 0/1 start) and Hugging Face's from configs; no download."""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import aiayn
from aiayn.convert.to_hf import to_hf

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py


def randomized(model):
    """Every bias, norm gain, [CLS] token and BatchNorm statistic of ``model`` away from its 0/1 start (matrices
    keep their random initialisation), so a dropped or mixed-up one shows."""
    with torch.no_grad():
        seen = set()
        for name, t in model.state_dict(keep_vars=True).items():
            if id(t) in seen or not t.is_floating_point():
                continue
            seen.add(id(t))  # a tied weight once
            if name.endswith("running_var"):
                t.uniform_(0.5, 1.5)
            elif t.dim() == 1 or name == "cls_token":
                t.add_(torch.randn_like(t) * 0.2)
    return model.eval()


def hf_randomized(model):
    """The same for a Hugging Face model (which zeroes its biases)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 or name.endswith("cls_token"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def exported(model, folder, auto, **kwargs):
    """``to_hf(model, folder)`` loaded by ``auto.from_pretrained``: the class ``config.json`` names, with nothing
    missing, unexpected or misshapen, and a folder holding what ``save_pretrained`` of it holds."""
    assert to_hf(model, folder) == folder
    config = json.loads((folder / "config.json").read_text())
    hf, info = auto.from_pretrained(folder, output_loading_info=True, **kwargs)
    assert type(hf).__name__ == config["architectures"][0]
    assert not any(info.values()), info
    hf.save_pretrained(folder / "saved")
    ours, theirs = load_file(folder / "model.safetensors"), load_file(folder / "saved" / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    return hf.eval()


def assert_round_trip(model, folder, skip=()):
    """``aiayn.from_hf(folder)`` is ``model``: the same class, config and state dict (but for ``skip``)."""
    back = aiayn.from_hf(folder)
    assert type(back) is type(model) and back.cfg == model.cfg
    ours, theirs = model.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys()
    for key in ours.keys() - set(skip):
        assert torch.equal(ours[key], theirs[key]), key
    return back


def assert_same_weights(hf, reloaded):
    """A Hugging Face model -> ours -> Hugging Face again holds the very weights it started with."""
    ours, theirs = hf.state_dict(), reloaded.state_dict()
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


# --- GPT-2 -------------------------------------------------------------------------------------------------

def gpt_from_hf():
    hf = hf_randomized(transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=97, n_positions=32, n_embd=48, n_layer=2, n_head=4, eos_token_id=96, bos_token_id=96,
        initializer_range=0.2, activation_function="gelu_new")))
    return aiayn.from_hf(hf), hf


GPT_CASES = {
    "ours": lambda: (randomized(aiayn.build("gpt-tiny", vocab_size=97, max_len=32, d_model=48, n_heads=4, n_layers=2,
                                            d_ff=96, eos_id=96)), None),
    "ours-untied-relu": lambda: (randomized(aiayn.build("gpt-tiny", vocab_size=97, max_len=32, d_model=40, n_heads=5,
                                                        n_layers=1, d_ff=72, activation="relu", tie_output=False,
                                                        dropout=0.1, layer_norm_eps=1e-6, eos_id=3)), None),
    "from-hf": gpt_from_hf,
}


@pytest.mark.parametrize("case", GPT_CASES)
def test_gpt_exports_to_gpt2_lm_head_model(case, tmp_path):
    ours, original = GPT_CASES[case]()
    hf = exported(ours, tmp_path / "hf", transformers.AutoModelForCausalLM)
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]  # left-padded to 6
    ids = torch.tensor([[0] * (6 - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (6 - len(p)) + [1] * len(p) for p in prompts])
    real = mask.bool()
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
        close(ours(ids, attention_mask=mask)[real], expected[real])
    assert_round_trip(ours, tmp_path / "hf")
    if original is not None:
        assert_same_weights(original, hf)


# --- BERT --------------------------------------------------------------------------------------------------

BERT_CLASSES = {"none": transformers.AutoModel, "mlm": transformers.AutoModelForMaskedLM,
                "pretraining": transformers.AutoModelForPreTraining,
                "classification": transformers.AutoModelForSequenceClassification}


def bert_batch():
    ids = torch.tensor([[2, 7, 8, 9, 3, 10, 11, 3], [2, 5, 6, 3, 0, 0, 0, 0]])  # [CLS] A [SEP] B [SEP], padded
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]])
    return ids, types, (ids != 0).long()


@pytest.mark.parametrize("head", BERT_CLASSES)
def test_bert_exports_to_the_class_of_its_head(head, tmp_path):
    ours = randomized(aiayn.build("bert-tiny", vocab_size=120, max_len=40, d_model=48, n_heads=4, n_layers=2, d_ff=96,
                                  head=head, num_labels=3, activation="gelu_tanh" if head == "mlm" else "gelu"))
    hf = exported(ours, tmp_path / "hf", BERT_CLASSES[head])
    ids, types, mask = bert_batch()
    real = mask.bool()
    with torch.no_grad():
        got, expected = ours(ids, types, mask), hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        if head == "none":
            close(got[real], expected.last_hidden_state[real])
            close(ours.pooled(got), expected.pooler_output)
        elif head == "mlm":
            close(ours.mlm_logits(got)[real], expected.logits[real])
        elif head == "pretraining":
            close(ours.mlm_logits(got)[real], expected.prediction_logits[real])
            close(ours.nsp_logits(got), expected.seq_relationship_logits)
        else:
            close(ours.classify(got), expected.logits)
    # [CLS] [SEP] [MASK] at 2, 3, 4 in a vocabulary of 120 come back (from_hf alone would guess 101-103).
    # BertForMaskedLM has no pooler: an MLM model's (unused by its head) comes back zero.
    back = assert_round_trip(ours, tmp_path / "hf", skip=("pooler.weight", "pooler.bias") if head == "mlm" else ())
    assert (back.cfg.cls_id, back.cfg.sep_id, back.cfg.mask_id) == (2, 3, 4)
    if head == "mlm":
        assert not back.pooler.weight.any() and not back.pooler.bias.any()


def test_a_hugging_face_bert_comes_back_with_the_weights_it_had(tmp_path):
    hf = hf_randomized(transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=120, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
        max_position_embeddings=40, num_labels=4, initializer_range=0.2)))
    ours = aiayn.from_hf(hf)
    assert_same_weights(hf, exported(ours, tmp_path / "hf", transformers.AutoModelForSequenceClassification))
    assert_round_trip(ours, tmp_path / "hf")


# --- Marian and BART ---------------------------------------------------------------------------------------

def marian_from_hf():
    hf = hf_randomized(transformers.MarianMTModel(transformers.MarianConfig(
        vocab_size=41, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="swish",
        scale_embedding=True, max_position_embeddings=64, pad_token_id=40, decoder_start_token_id=40, eos_token_id=0,
        forced_eos_token_id=None, init_std=0.3)))
    with torch.no_grad():
        hf.final_logits_bias.normal_(0, 0.5)
    return aiayn.from_hf(hf), hf


def bart_from_hf():
    hf = hf_randomized(transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=41, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=40, init_std=0.2,
        forced_eos_token_id=None, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2)))
    return aiayn.from_hf(hf), hf


SMALL = {"d_model": 32, "n_heads": 4, "n_encoder_layers": 2, "n_decoder_layers": 2, "d_ff": 64}
SEQ2SEQ_CASES = {
    # the paper's Transformer with Marian's (concatenated) sinusoids: shared, tied, output bias, SiLU
    "marian": lambda: (randomized(aiayn.build(
        "transformer-tiny", **SMALL, src_vocab_size=41, tgt_vocab_size=41, max_len=64, positional="sinusoidal-concat",
        activation="silu", pad_id=40, bos_id=40, eos_id=0)), None),
    "marian-two-vocabularies-untied": lambda: (randomized(aiayn.build(
        "transformer-tiny", **SMALL, src_vocab_size=41, tgt_vocab_size=30, max_len=64, positional="sinusoidal-concat",
        share_embeddings=False, tie_output=False, scale_embedding=False, pad_id=1, bos_id=1, eos_id=0)), None),
    "bart": lambda: (randomized(aiayn.build("bart-tiny", **SMALL, src_vocab_size=41, tgt_vocab_size=41, max_len=40,
                                            output_bias=True, pad_id=1)), None),
    "bart-untied-scaled-gelu-tanh": lambda: (randomized(aiayn.build(
        "bart-tiny", **SMALL, src_vocab_size=41, tgt_vocab_size=41, max_len=40, tie_output=False, output_bias=True,
        scale_embedding=True, activation="gelu_tanh", pad_id=1)), None),
    "marian-from-hf": marian_from_hf,
    "bart-from-hf": bart_from_hf,
}


@pytest.mark.parametrize("case", SEQ2SEQ_CASES)
def test_transformer_exports_to_marian_or_bart(case, tmp_path):
    ours, original = SEQ2SEQ_CASES[case]()
    hf = exported(ours, tmp_path / "hf", transformers.AutoModelForSeq2SeqLM)
    assert type(hf).__name__ == ("MarianMTModel" if "marian" in case else "BartForConditionalGeneration")
    pad, bos, eos = ours.cfg.pad_id, ours.cfg.bos_id, ours.cfg.eos_id
    src = torch.tensor([[5, 9, 12, 7, 3, eos], [8, 4, eos, pad, pad, pad], [11, 2, 6, 6, eos, pad]])
    tgt = torch.tensor([[bos, 4, 9, 2, 17], [bos, 3, 3, 8, 5], [bos, 21, 5, 5, 13]])
    real = torch.arange(5) < torch.tensor([[5], [2], [4]])  # targets of 5, 2 and 4 positions, padded at the end
    tgt = tgt.masked_fill(~real, pad)
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt,
                      decoder_attention_mask=real.long()).logits
        close(ours(src, tgt)[real], expected[real])
    assert_round_trip(ours, tmp_path / "hf")
    if original is not None:
        assert_same_weights(original, hf)


@pytest.mark.parametrize("tied", [True, False], ids=["shared-tied", "two-vocabularies-untied"])
def test_the_paper_s_interleaved_sinusoids_export_to_marian_reordered(tied, tmp_path):
    # sin, cos, sin, ... is Marian's sines-then-cosines up to a permutation of the model dimension: every weight
    # reordered, the same network
    ours = randomized(aiayn.build("transformer-tiny", **SMALL, src_vocab_size=41, tgt_vocab_size=41 if tied else 30,
                                  max_len=64, share_embeddings=tied, tie_output=tied, pad_id=1, bos_id=1, eos_id=0))
    assert ours.cfg.positional == "sinusoidal"
    hf = exported(ours, tmp_path / "hf", transformers.AutoModelForSeq2SeqLM)
    assert type(hf).__name__ == "MarianMTModel"
    src, tgt = torch.tensor([[5, 9, 12, 7, 0], [8, 4, 0, 1, 1]]), torch.tensor([[1, 4, 9, 2], [1, 3, 3, 8]])
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != 1).long(), decoder_input_ids=tgt).logits
        close(ours(src, tgt), expected)
        back = aiayn.from_hf(tmp_path / "hf")  # the reordered model: Marian's positions, the same outputs
        assert back.cfg == dataclasses.replace(ours.cfg, positional="sinusoidal-concat")
        close(back(src, tgt), expected)
        assert not torch.equal(back.src_embed.tokens.weight, ours.src_embed.tokens.weight)  # reordered, not copied


def test_concat_positions_refuses_a_weight_it_does_not_place():
    from aiayn.models.transformer.hf import concat_positions

    model = aiayn.build("transformer-tiny", n_encoder_layers=1, n_decoder_layers=1)
    model.register_buffer("scale", torch.ones(model.cfg.d_model))
    with pytest.raises(ValueError, match="'scale'"):
        concat_positions(model)


def test_a_marian_without_output_bias_gets_a_zero_one(tmp_path):
    # Marian always has final_logits_bias: zeros compute what no bias computes, and from_hf keeps them as a bias
    ours = randomized(aiayn.build("transformer-tiny", **SMALL, src_vocab_size=41, tgt_vocab_size=41,
                                  positional="sinusoidal-concat", output_bias=False, pad_id=40, bos_id=40, eos_id=0))
    hf = exported(ours, tmp_path / "hf", transformers.AutoModelForSeq2SeqLM)
    src, tgt = torch.tensor([[5, 9, 12, 0], [8, 4, 0, 40]]), torch.tensor([[40, 4, 9], [40, 3, 3]])
    with torch.no_grad():
        close(ours(src, tgt), hf(input_ids=src, attention_mask=(src != 40).long(), decoder_input_ids=tgt).logits)
    back = aiayn.from_hf(tmp_path / "hf")
    assert back.cfg.output_bias and not back.generator.bias.any()


# --- ViT and Swin ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_classes", [10, 0], ids=["classifier", "headless"])
def test_vit_exports_to_vit_for_image_classification_or_vit_model(num_classes, tmp_path):
    ours = randomized(aiayn.build("vit-tiny", n_layers=2, num_classes=num_classes, activation="gelu_tanh"))
    images = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        if num_classes:
            hf = exported(ours, tmp_path / "hf", transformers.AutoModelForImageClassification)
            close(ours(images), hf(images).logits)
        else:  # no pooler to write: Hugging Face's would be random
            hf = exported(ours, tmp_path / "hf", transformers.AutoModel, add_pooling_layer=False)
            expected = hf(images).last_hidden_state
            close(ours.forward_features(images), expected)
            close(ours(images), expected[:, 0])
    assert_round_trip(ours, tmp_path / "hf")


@pytest.mark.parametrize("num_classes", [10, 0], ids=["classifier", "headless"])
def test_swin_exports_to_swin_for_image_classification_or_swin_model(num_classes, tmp_path):
    ours = randomized(aiayn.build("swin-tiny", num_classes=num_classes))
    auto = transformers.AutoModelForImageClassification if num_classes else transformers.AutoModel
    hf = exported(ours, tmp_path / "hf", auto)
    for h, w in [(28, 28), (27, 30)]:  # a 7 x 7 map padded to 2 x 2 windows of 4; then 7 x 8 from a padded image
        images = torch.randn(2, 1, h, w)
        with torch.no_grad():
            if num_classes:
                close(ours(images), hf(images).logits)
            else:
                expected = hf(images)
                close(ours.forward_features(images).flatten(1, 2), expected.last_hidden_state)
                close(ours(images), expected.pooler_output)
    assert_round_trip(ours, tmp_path / "hf")


@pytest.mark.parametrize("family", ["vit", "swin"])
def test_hugging_face_vit_and_swin_come_back_with_the_weights_they_had(family, tmp_path):
    if family == "vit":
        hf = transformers.ViTForImageClassification(transformers.ViTConfig(
            image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, num_labels=5))
    else:
        hf = transformers.SwinForImageClassification(transformers.SwinConfig(
            image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4, num_labels=5))
    hf = hf_randomized(hf)
    ours = aiayn.from_hf(hf)
    reloaded = exported(ours, tmp_path / "hf", transformers.AutoModelForImageClassification)
    assert_same_weights(hf, reloaded)
    images = torch.randn(2, 3, 16 if family == "vit" else 32, 16 if family == "vit" else 32)
    with torch.no_grad():
        close(reloaded(images).logits, hf(images).logits)
    assert_round_trip(ours, tmp_path / "hf")


# --- DETR --------------------------------------------------------------------------------------------------

def detr_from_hf():
    backbone = transformers.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[16, 16, 32, 32],
                                         depths=[1, 2, 1, 1], layer_type="bottleneck", out_features=["stage4"])
    hf = transformers.DetrForObjectDetection(transformers.DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone, d_model=32,
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_queries=6, num_labels=3, init_std=0.3))
    with torch.no_grad():
        for name, b in hf.named_buffers():
            if name.endswith("running_var"):
                b.uniform_(0.5, 1.5)
            elif name.endswith(("running_mean", "normalization.weight", "normalization.bias")):
                b.add_(torch.randn_like(b) * 0.1)
    hf = hf_randomized(hf)
    return aiayn.from_hf(hf), hf


DETR_CASES = {
    "ours": lambda: (randomized(aiayn.build("detr-tiny", n_encoder_layers=1, backbone_frozen_stages=2,
                                            activation="gelu")), None),
    "from-hf-bottleneck": detr_from_hf,
}


@pytest.mark.parametrize("case", DETR_CASES)
def test_detr_exports_to_detr_for_object_detection(case, tmp_path):
    ours, original = DETR_CASES[case]()
    hf = exported(ours, tmp_path / "hf", transformers.AutoModelForObjectDetection)
    images = torch.randn(2, 3, 96, 128)
    mask = torch.ones(2, 96, 128, dtype=torch.long)
    mask[1, 64:, :], mask[1, :, 70:] = 0, 0  # the second image is 64 x 70, padded
    with torch.no_grad():
        got, expected = ours(images, mask), hf(pixel_values=images, pixel_mask=mask)
        close(got["logits"], expected.logits)
        close(got["boxes"], expected.pred_boxes)
    assert_round_trip(ours, tmp_path / "hf")  # backbone_frozen_stages too, kept under the config's "aiayn" key
    if original is not None:
        assert_same_weights(original, hf)


def test_a_timm_backbone_detr_is_refused_with_the_revision_that_converts(tmp_path):
    # facebook/detr-resnet-50's config.json on its main revision (transformers 4), abridged
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "detr", "architectures": ["DetrForObjectDetection"], "use_timm_backbone": True,
        "backbone": "resnet50", "backbone_config": None, "use_pretrained_backbone": True, "num_queries": 100}))
    save_file({}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"use_timm_backbone=True .*'resnet50'.*revision=\"no_timm\""):
        aiayn.from_hf(tmp_path)
    from aiayn.models.detr import hf as detr

    # transformers 5 writes the same default as a timm_backbone config
    with pytest.raises(ValueError, match=r"revision=\"no_timm\""):
        detr.config(transformers.DetrConfig().to_dict())


# --- refusals ----------------------------------------------------------------------------------------------

REFUSED = [
    ("transformer-tiny", {"norm_first": True, "positional": "sinusoidal-concat"}, "norm_first=True"),
    # the paper's interleaved sinusoids exported as Marian still need post-norm
    ("transformer-tiny", {"norm_first": True}, "norm_first=True"),
    ("transformer-tiny", {"positional": "none"}, "positional='none'"),
    ("transformer-tiny", {"positional": "sinusoidal-concat", "cross_scoring": "additive"}, "cross_scoring='additive'"),
    ("transformer-tiny", {"positional": "sinusoidal-concat", "layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06"),
    ("transformer-tiny", {"positional": "sinusoidal-concat", "embed_norm": True}, "embed_norm=True"),
    ("bart-tiny", {"positional_offset": 0}, "positional_offset=0"),
    ("bart-tiny", {"embed_norm": False}, "embed_norm=False"),
    ("bart-tiny", {"share_embeddings": False}, "share_embeddings=False"),
    ("swin-tiny", {"layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06"),
    ("detr-tiny", {"norm_first": True}, "norm_first=True"),
    ("detr-tiny", {"layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06"),
]


@pytest.mark.parametrize("preset, overrides, message", REFUSED,
                         ids=[f"{p}-{'-'.join(o)}" for p, o, _ in REFUSED])
def test_configs_hugging_face_cannot_express_are_refused_by_name_and_nothing_is_written(preset, overrides, message,
                                                                                      tmp_path):
    model = aiayn.build(preset, **overrides)
    with pytest.raises(ValueError, match=f"^{message}"):
        to_hf(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_what_is_not_a_model_of_ours_is_refused(tmp_path):
    with pytest.raises(TypeError, match=r"to_hf takes an aiayn model.*GPT.*got Linear"):
        to_hf(torch.nn.Linear(2, 2), tmp_path)
