import pytest
import torch

import aiayn
from aiayn.models.vit import ViTConfig, resize_positions


@pytest.mark.parametrize("name, count", [("vit-b16", 86_567_656), ("vit-l16", 304_326_632)])
def test_preset_parameter_counts_are_the_papers(name, count):
    with torch.device("meta"):
        assert aiayn.count_parameters(aiayn.build(name)) == count


def tiny(**kw):
    torch.manual_seed(0)
    model = aiayn.build("vit-tiny", patch_size=4, d_model=32, n_heads=4, n_layers=2, d_ff=64, **kw)
    with torch.no_grad():  # a non-zero head and [CLS] (both start at zero), so outputs depend on everything
        model.cls_token.normal_()
        if model.cfg.num_classes:
            model.head.weight.normal_(std=0.5)
    return model.eval()


def test_logits_features_and_a_headless_model():
    model = tiny()
    images = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        features = model.forward_features(images)
        logits = model(images)
    assert features.shape == (3, 1 + 49, 32) and logits.shape == (3, 10)
    torch.testing.assert_close(logits, model.head(features[:, 0]))
    headless = tiny(num_classes=0)
    assert headless(images).shape == (3, 32)


def test_each_image_is_classified_on_its_own():
    model = tiny()
    images = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(model(images), torch.cat([model(images[i : i + 1]) for i in range(4)]),
                                   atol=1e-5, rtol=1e-5)


def test_other_sizes_interpolate_the_position_table():
    table = torch.randn(1, 16, 8)
    torch.testing.assert_close(resize_positions(table, (4, 4)), table)  # the same grid: unchanged
    bigger = resize_positions(table, (6, 8))
    assert bigger.shape == (1, 48, 8)
    model = tiny()
    with torch.no_grad():
        assert model(torch.randn(2, 1, 40, 20)).shape == (2, 10)
        assert model.forward_features(torch.randn(2, 1, 40, 20)).shape == (2, 1 + 10 * 5, 32)


def test_every_parameter_learns():
    model = tiny().train()
    model(torch.randn(2, 1, 28, 28)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_save_and_load_give_the_same_model(tmp_path):
    model = tiny()
    aiayn.save(model, tmp_path)
    loaded = aiayn.load(tmp_path)
    assert loaded.cfg == model.cfg
    images = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), model(images))


def test_wrong_images_and_configs_are_refused_with_names():
    model = tiny()
    with pytest.raises(ValueError, match=r"images have 3 channels .* wants in_channels=1"):
        model(torch.randn(2, 3, 28, 28))
    with pytest.raises(ValueError, match=r"images are 30 x 28 pixels; ViT wants .* multiples of patch_size=4"):
        model(torch.randn(2, 1, 30, 28))
    with pytest.raises(ValueError, match=r"images must be \(batch, channels, height, width\), got shape \(1, 28, 28\)"):
        model(torch.randn(1, 28, 28))
    with pytest.raises(ValueError, match="images must be a float tensor"):
        model(torch.zeros(1, 1, 28, 28, dtype=torch.uint8))
    with pytest.raises(ValueError, match="image_size=30 must be divisible by patch_size=4"):
        ViTConfig(image_size=30, patch_size=4)
    with pytest.raises(ValueError, match="num_classes=-1"):
        aiayn.preset("vit-tiny", num_classes=-1)
