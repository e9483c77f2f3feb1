"""Detection data, a short DETR training run on the synthetic shapes, and ``detect`` on an image (resuming a run
exactly: tests/cli/test_resume.py)."""

import json
import re

import numpy as np
import pytest
import torch

import aiayn
from aiayn import recipes
from aiayn.data.detection import collate, draw_shapes, read_voc, read_voc_annotation, synthetic_shapes
from aiayn.pipelines.detect import detect
from aiayn.recipes.detect import evaluate_detr
from shared import DATA

BCCD = DATA / "bccd"


@pytest.mark.parametrize("class_colours", [True, False])
def test_synthetic_shapes_are_repeatable_and_their_boxes_are_tight(class_colours):
    a = synthetic_shapes(20, seed=3, size=64, class_colours=class_colours)
    b = synthetic_shapes(20, seed=3, size=64, class_colours=class_colours)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1]["boxes"], y[1]["boxes"]) for x, y in zip(a, b))
    for image, target in a:
        assert image.shape == (3, 64, 64) and image.dtype == torch.uint8
        assert 1 <= len(target["labels"]) <= 3 and target["labels"].max() < 4
        for cx, cy, w, h in (target["boxes"] * 64).tolist():
            x0, y0, x1, y1 = round(cx - w / 2), round(cy - h / 2), round(cx + w / 2), round(cy + h / 2)
            bright = image.max(0).values > 100  # every shape has a channel above 120, the background none above 82
            inside = bright[y0:y1, x0:x1]
            assert inside[0].any() and inside[-1].any() and inside[:, 0].any() and inside[:, -1].any()
    images, mask, targets = collate(a[:4])
    assert images.shape == (4, 3, 64, 64) and mask.all() and len(targets) == 4


def test_voc_annotations_drop_boxes_without_area(tmp_path):
    xml = """<annotation><size><width>200</width><height>100</height><depth>3</depth></size>
      <object><name>RBC</name><bndbox><xmin>11</xmin><ymin>21</ymin><xmax>60</xmax><ymax>40</ymax></bndbox></object>
      <object><name>RBC</name><bndbox><xmin>504</xmin><ymin>37</ymin><xmax>504</xmax><ymax>37</ymax></bndbox></object>
      <object><name>WBC</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>200</xmax><ymax>100</ymax></bndbox></object>
      <object><name>RBC</name><bndbox><xmin>220</xmin><ymin>10</ymin><xmax>230</xmax><ymax>20</ymax></bndbox></object>
    </annotation>"""
    (tmp_path / "a.xml").write_text(xml)
    target, size, dropped = read_voc_annotation(tmp_path / "a.xml", ["RBC", "WBC"])
    # the second box has no area; the last lies wholly right of the 200-px image (clipped, nothing is left)
    assert size == (100, 200) and dropped == 2 and target["labels"].tolist() == [0, 1]
    # 1-based inclusive corners: pixels 11..60 are [10, 60) -> centre 35/200, width 50/200.
    torch.testing.assert_close(target["boxes"], torch.tensor([[35 / 200, 30 / 100, 50 / 200, 20 / 100],
                                                              [0.5, 0.5, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="class 'WBC' is not one of"):
        read_voc_annotation(tmp_path / "a.xml", ["RBC"])


@pytest.mark.skipif(not BCCD.is_dir(), reason="needs the shared BCCD data")
def test_bccd_test_split_reads_as_published():
    samples, classes, dropped = read_voc(BCCD, "test", max_size=128)
    assert classes == ["Platelets", "RBC", "WBC"] and len(samples) == 72
    assert samples[0][0].shape == (3, 96, 128)
    boxes = torch.cat([t["boxes"] for _, t in samples])
    assert (boxes[:, 2:] > 0).all() and (boxes >= 0).all() and (boxes <= 1).all()
    _, _, dropped_all = read_voc(BCCD, "trainval", max_size=32)
    assert dropped + dropped_all == 2  # BloodImage_00338 and _00343, whatever split holds them


def test_a_short_run_lowers_the_loss_beats_an_untrained_model_and_detects(tmp_path, one_thread):
    seed = 0
    kw = {"steps": 200, "batch_size": 8, "image_size": 64, "max_objects": 1, "n_test": 64, "eval_every": 200,
          "warmup": 20, "lr": 1e-3, "lr_backbone": 1e-3, "clip": 1.0, "seed": seed, "out": str(tmp_path),
          "progress": False, "verbose": False}
    result = recipes.train("detect", **kw)
    losses = [h["loss"] for h in result["history"]]
    assert np.mean(losses[-10:]) < 0.75 * np.mean(losses[:10])  # about 12 -> 6: the boxes move to the objects
    run = result["run"]
    assert {"args.json", "classes.json", "train_state.safetensors", "model.safetensors", "validation.json"} <= {
        p.name for p in run.iterdir()}
    args = json.loads((run / "args.json").read_text())
    assert args["recipe"] == "detect" and args["image_size"] == 64
    assert 0 <= result["map"] <= result["map50"] <= 1

    # The baseline is the model the run started from (same config and seed, no update) on the same 64 held-out
    # canvases. Seeds 0 to 4, untrained -> trained: set loss 11.5 -> 5.7, 11.9 -> 6.3, 11.2 -> 5.6, 11.1 -> 5.4,
    # 11.9 -> 6.1; mAP@0.5 0.0003 -> 0.42, 0.0007 -> 0.26, 0.0000 -> 0.27, 0.024 -> 0.48, 0.0008 -> 0.37. Another
    # machine's rounding sends 200 updates down another path, hence wide margins. Trained on the class loss alone
    # (boxes never learnt), the set loss only falls to 0.76-0.85 of the untrained one, and mAP@0.5 reaches 0.03-0.11.
    cfg = aiayn.load(run).cfg
    torch.manual_seed(seed)  # as the recipe does before it builds the model
    untrained = evaluate_detr(aiayn.build(cfg), synthetic_shapes(64, seed + 1, 64, 1))
    assert result["validation"][-1]["val_loss"] < 0.65 * untrained["val_loss"]
    assert result["map50"] > untrained["map50"] + 0.1

    from PIL import Image

    image, _ = draw_shapes(np.random.default_rng(5), size=64)
    Image.fromarray(image.permute(1, 2, 0).numpy()).resize((128, 96)).save(tmp_path / "shapes.png")
    found = detect(run, tmp_path / "shapes.png", threshold=0.0, verbose=False)
    assert found["image"].is_file() and len(found["detections"]) == 8  # every query, at threshold 0
    d = found["detections"][0]
    assert d["name"] in ("square", "disc", "triangle", "cross") and len(d["box"]) == 4
    assert 0 <= d["box"][0] <= d["box"][2] <= 128 and 0 <= d["box"][1] <= d["box"][3] <= 96  # original pixels
    with pytest.raises(FileNotFoundError, match=re.escape("no model.safetensors")):
        detect(tmp_path, tmp_path / "shapes.png")
