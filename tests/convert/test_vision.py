"""Our ViT and Swin against Hugging Face's (tiny random-weight models built from configs, no download)."""

import json

import pytest
import torch

import aiayn
from aiayn.models.swin import hf as swin_convert
from aiayn.models.vit import hf as vit_convert

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity


def randomized(model):
    with torch.no_grad():  # norms, biases, [CLS] and bias tables away from their initial 1/0
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(("bias", "bias_table", "cls_token")):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def vit_config(**overrides):
    cfg = {"image_size": 16, "patch_size": 4, "num_channels": 3, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 64, "num_labels": 5}
    cfg.update(overrides)
    return transformers.ViTConfig(**cfg)


def swin_config(**overrides):
    cfg = {"image_size": 32, "patch_size": 2, "num_channels": 3, "embed_dim": 16, "depths": [2, 2],
           "num_heads": [2, 4], "window_size": 4, "num_labels": 5}
    cfg.update(overrides)
    return transformers.SwinConfig(**cfg)


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


# 16 px: the configured size; 24 x 32: a 6 x 8 grid, the position table interpolated (bicubic)
VIT_SIZES = [(16, 16), (24, 32)]


def test_vit_model_features_equal_hugging_face_and_its_pooler_is_left_out():
    torch.manual_seed(0)
    hf = randomized(transformers.ViTModel(vit_config()))
    assert hf.pooler is not None
    ours = aiayn.from_hf(hf)
    assert ours.cfg.num_classes == 0 and ours.cfg.layer_norm_eps == 1e-12
    for h, w in VIT_SIZES:
        images = torch.randn(2, 3, h, w)
        with torch.no_grad():
            expected = hf(images, interpolate_pos_encoding=(h, w) != (16, 16)).last_hidden_state
            close(ours.forward_features(images), expected)
            close(ours(images), expected[:, 0])


def test_vit_classification_logits_equal_hugging_face():
    torch.manual_seed(0)
    hf = randomized(transformers.ViTForImageClassification(vit_config(hidden_act="gelu_new", qkv_bias=False)))
    ours = aiayn.from_hf(hf)
    assert ours.cfg.num_classes == 5 and ours.cfg.activation == "gelu_tanh"
    for h, w in VIT_SIZES:
        images = torch.randn(3, 3, h, w)
        with torch.no_grad():
            close(ours(images), hf(images, interpolate_pos_encoding=(h, w) != (16, 16)).logits)


# the configured 32 px (a 16 x 16 map: 4 x 4 windows, shifted; then 8 x 8); 27 x 30 px, padded to 28 x 30
# px, a 14 x 15 map padded to 16 x 16 for the windows, merged to 7 x 8; then 16 px, whose last stage is one
# window, unshifted. Hugging Face keeps that last change on its modules, so it comes last.
SWIN_SIZES = [(32, 32), (27, 30), (16, 16)]


# attention takes its windows in groups of CHUNK_TOKENS patches (the MLP its rows in groups of CHUNK_ROWS);
# 48 = 3 windows of 16, so groups straddle images (16 windows each in stage 1) and the shifted windows'
# masks are picked per group
@pytest.mark.parametrize("chunk", [None, 48])
def test_swin_model_features_and_pooled_output_equal_hugging_face(chunk, monkeypatch):
    if chunk:
        monkeypatch.setattr("aiayn.models.swin.model.CHUNK_TOKENS", chunk)
        monkeypatch.setattr("aiayn.layers.feedforward.CHUNK_ROWS", chunk)
    torch.manual_seed(0)
    hf = randomized(transformers.SwinModel(swin_config()))
    ours = aiayn.from_hf(hf)
    assert ours.cfg.num_classes == 0
    for h, w in SWIN_SIZES:
        images = torch.randn(2, 3, h, w)
        with torch.no_grad():
            expected = hf(images)
            close(ours.forward_features(images).flatten(1, 2), expected.last_hidden_state)
            close(ours(images), expected.pooler_output)


def test_swin_classification_logits_equal_hugging_face():
    torch.manual_seed(0)
    hf = randomized(transformers.SwinForImageClassification(swin_config(depths=[2, 2, 2], num_heads=[1, 2, 4])))
    ours = aiayn.from_hf(hf)
    assert ours.cfg.num_classes == 5 and ours.cfg.n_layers == (2, 2, 2)
    for h, w in SWIN_SIZES[:2]:  # at 16 px the last map, 2 x 2, is smaller than a window: Hugging Face fails
        images = torch.randn(3, 3, h, w)
        with torch.no_grad():
            close(ours(images), hf(images).logits)


def test_swin_gradients_through_the_window_gather_and_scatter_equal_hugging_face():
    # with gradients a block takes all its windows as one group (groups would keep every activation anyway):
    # this checks the backward of the index_copy_ gather and scatter and of the per-window region masks
    torch.manual_seed(0)
    hf = randomized(transformers.SwinForImageClassification(swin_config(drop_path_rate=0.0)))
    ours = aiayn.from_hf(hf)
    images = torch.randn(3, 3, 27, 30)  # padded in both stages
    grads = []
    for model, run in [(ours, ours), (hf, lambda x: hf(x).logits)]:
        x = images.clone().requires_grad_()
        run(x).square().sum().backward()
        # the input's gradient, and the total over the weights (named differently on each side)
        grads.append((x.grad, torch.stack([p.grad.square().sum() for p in model.parameters()]).sum()))
    close(grads[0][0], grads[1][0])
    close(grads[0][1], grads[1][1])


# transformers 4 named the weights differently; checkpoints saved by it are still the common case on disk
VIT_OLD = [("layers.", "encoder.layer."), ("attention.q_proj", "attention.attention.query"),
           ("attention.k_proj", "attention.attention.key"), ("attention.v_proj", "attention.attention.value"),
           ("attention.o_proj", "attention.output.dense"), ("mlp.fc1", "intermediate.dense"),
           ("mlp.fc2", "output.dense")]
SWIN_OLD = [("attention.q_proj", "attention.self.query"), ("attention.k_proj", "attention.self.key"),
            ("attention.v_proj", "attention.self.value"),
            ("attention.relative_position_bias.relative_position_bias_table",
             "attention.self.relative_position_bias_table"),
            ("attention.o_proj", "attention.output.dense"), ("mlp.fc1", "intermediate.dense"),
            ("mlp.fc2", "output.dense")]


def renamed(state, table):
    out = {}
    for key, value in state.items():
        for new, old in table:
            key = key.replace(new, old)
        out[key] = value.contiguous()
    return out


def save_folder(folder, hf, state):
    from safetensors.torch import save_file

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf.config.to_dict()))
    save_file(state, folder / "model.safetensors")
    return folder


def test_folders_with_transformers_4_names_convert(tmp_path):
    torch.manual_seed(0)
    hf = randomized(transformers.ViTForImageClassification(vit_config()))
    folder = save_folder(tmp_path / "vit", hf, renamed(hf.state_dict(), VIT_OLD))
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        close(aiayn.from_hf(folder)(images), hf(images).logits)

    hf = randomized(transformers.SwinForImageClassification(swin_config()))
    state = renamed(hf.state_dict(), SWIN_OLD)
    index = aiayn.layers.vision.relative_position_index(4).flatten()
    for key in [k for k in state if k.endswith("relative_position_bias_table")]:  # old files stored the index
        state[key.replace("bias_table", "index")] = index.clone()
    folder = save_folder(tmp_path / "swin", hf, state)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        close(aiayn.from_hf(folder)(images), hf(images).logits)


def test_missing_unexpected_and_misshapen_weights_are_refused():
    torch.manual_seed(0)
    for module, hf in ((vit_convert, transformers.ViTForImageClassification(vit_config())),
                       (swin_convert, transformers.SwinForImageClassification(swin_config()))):
        cfg, state = hf.config.to_dict(), dict(hf.state_dict())
        with pytest.raises(ValueError, match=r"unexpected keys\): \['extra.weight'\]"):
            module.convert(cfg, {**state, "extra.weight": torch.zeros(1)})
        gone = next(k for k in state if k.endswith("layernorm_after.weight"))
        with pytest.raises(ValueError, match=f"no weight '{gone}' \\(missing key\\)"):
            module.convert(cfg, {k: v for k, v in state.items() if k != gone})
        with pytest.raises(ValueError, match=r"misshapen \['head.weight: \(5, 3\d\), wanted \(5, \d+\)'\]"):
            module.convert(cfg, {**state, "classifier.weight": torch.zeros(5, 33 if module is vit_convert else 31)})
    with pytest.raises(ValueError, match="use_absolute_embeddings=True"):
        aiayn.from_hf(transformers.SwinModel(swin_config(use_absolute_embeddings=True)))


def test_a_converted_swin_classifies_image_files_as_hugging_face_with_its_own_normalisation(tmp_path):
    # Swin's processor normalises with ImageNet's mean and std, not our recipe's [-1, 1]; aiayn convert keeps its
    # preprocessor_config.json and classify (and the pipeline) read it
    import numpy as np
    from PIL import Image

    from aiayn.convert.folder import convert
    from aiayn.pipelines.image import classify

    torch.manual_seed(0)
    hf = randomized(transformers.SwinForImageClassification(swin_config()))
    hf.save_pretrained(tmp_path / "hf")
    processor = transformers.ViTImageProcessor(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225],
                                               size={"height": 32, "width": 32})
    processor.save_pretrained(tmp_path / "hf")
    run = convert(tmp_path / "hf", tmp_path / "run")
    pixels = (np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)  # at the model's size
    Image.fromarray(pixels).save(tmp_path / "a.png")
    with torch.no_grad():
        expected = hf(processor(Image.open(tmp_path / "a.png"), return_tensors="pt")["pixel_values"]).logits
    expected = expected.softmax(-1)[0]
    for got in (classify(run, [tmp_path / "a.png"], top=5)[0], aiayn.pipeline(run).classify([tmp_path / "a.png"],
                                                                                            top=5)[0]):
        top = got["top"]
        assert [t["class"] for t in top] == expected.argsort(descending=True).tolist()
        assert [t["probability"] for t in top] == pytest.approx(expected.sort(descending=True).values.tolist(),
                                                                abs=1e-4)
