"""Our DETR against Hugging Face's DetrForObjectDetection with a ResNet backbone (random weights from a config,
no download), and DETR-R50's parameter count against Hugging Face's."""

import pytest
import torch

import aiayn
from aiayn.models.detr.hf import convert

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity


def detr_config(layer_type="basic", hidden_sizes=(8, 16, 16, 24), depths=(1, 1, 1, 1), **overrides):
    backbone = transformers.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=list(hidden_sizes),
                                         depths=list(depths), layer_type=layer_type, out_features=["stage4"])
    return transformers.DetrConfig(**{
        "use_timm_backbone": False, "use_pretrained_backbone": False, "backbone_config": backbone, "d_model": 32,
        "encoder_layers": 2, "decoder_layers": 3, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "num_queries": 6, "num_labels": 3, "init_std": 0.3, **overrides})


def randomized(model):
    with torch.no_grad():  # norms, biases and BatchNorm statistics away from 1/0, query positions spread out
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
            if "query_position" in name:
                p.normal_(0, 3)
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand_like(b) + 0.5)
            elif name.endswith(("running_mean", "normalization.weight", "normalization.bias")):
                b.add_(torch.randn_like(b) * 0.1)
    return model.eval()


def images_and_mask():
    images = torch.randn(2, 3, 96, 128)
    mask = torch.ones(2, 96, 128, dtype=torch.long)
    mask[1, 64:, :], mask[1, :, 70:] = 0, 0  # the second image is 64 x 70, padded
    return images, mask


@pytest.mark.parametrize("backbone", [{}, {"layer_type": "bottleneck", "hidden_sizes": (16, 16, 32, 32),
                                           "depths": (1, 2, 1, 1)}], ids=["basic", "bottleneck"])
def test_logits_and_boxes_equal_detr_for_object_detection(backbone):
    torch.manual_seed(0)
    hf = randomized(transformers.DetrForObjectDetection(detr_config(**backbone)))
    ours = aiayn.from_hf(hf)
    assert ours.cfg.num_classes == 3 and ours.cfg.backbone_block == backbone.get("layer_type", "basic")
    images, mask = images_and_mask()
    with torch.no_grad():
        for pixel_mask in (None, mask):
            expected, got = hf(pixel_values=images, pixel_mask=pixel_mask), ours(images, pixel_mask)
            torch.testing.assert_close(got["logits"], expected.logits, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got["boxes"], expected.pred_boxes, atol=1e-4, rtol=1e-4)
        # The mask matters, so the comparison above checks its handling (and the queries differ, so the
        # query positions are checked too).
        assert (hf(pixel_values=images, pixel_mask=mask).logits - hf(pixel_values=images).logits).abs().max() > 0.05
        assert expected.logits.std(1).mean() > 0.01


def test_detr_r50_counts_what_hugging_face_counts():
    cfg = transformers.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, num_labels=91,
                                  backbone_config=transformers.ResNetConfig(out_features=["stage4"]))
    with torch.device("meta"):
        hf = transformers.DetrForObjectDetection(cfg)
        ours = aiayn.build("detr-r50")
    assert aiayn.count_parameters(ours) == hf.num_parameters() == 41_524_768
    # DETR trains all but the stem and stage 1 (Hugging Face's own freezing misses its stage names and
    # freezes the whole ResNet, so count its trained parameters by name).
    trained = sum(p.numel() for n, p in hf.named_parameters() if "embedder" not in n and ".stages.0." not in n)
    assert sum(p.numel() for p in ours.parameters() if p.requires_grad) == trained == 41_302_368


def test_missing_unexpected_and_unsupported_weights_are_refused():
    hf = transformers.DetrForObjectDetection(detr_config())
    config, tensors = hf.config.to_dict(), dict(hf.state_dict())
    with pytest.raises(ValueError, match="missing key"):
        convert(config, {k: v for k, v in tensors.items() if k != "model.decoder.layernorm.weight"})
    with pytest.raises(ValueError, match=r"unexpected keys\): \['extra.weight'\]"):
        convert(config, {**tensors, "extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="misshapen"):
        convert(config, {**tensors, "model.query_position_embeddings.weight": torch.zeros(7, 32)})
    with pytest.raises(ValueError, match="position_embedding_type"):
        convert({**config, "position_embedding_type": "learned"}, tensors)
    with pytest.raises(ValueError, match="only a Hugging Face ResNet backbone converts"):
        convert({**config, "use_timm_backbone": True}, tensors)
