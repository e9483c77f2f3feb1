"""DETR: boxes, the Hungarian matcher (against brute force), the set loss, the model's outputs and inputs."""

import itertools

import pytest
import torch

import aiayn
from aiayn.models.detr.boxes import box_iou, cxcywh_to_xyxy, generalized_box_iou, xyxy_to_cxcywh
from aiayn.models.detr.criterion import SetCriterion
from aiayn.models.detr.matcher import HungarianMatcher
from aiayn.models.detr.postprocess import postprocess


def tiny(**overrides):
    return aiayn.build("detr-tiny", **overrides).eval()


# --- boxes -------------------------------------------------------------------------------------------------


def test_box_formats_round_trip():
    cxcywh = torch.rand(50, 4)
    torch.testing.assert_close(xyxy_to_cxcywh(cxcywh_to_xyxy(cxcywh)), cxcywh)
    torch.testing.assert_close(cxcywh_to_xyxy(torch.tensor([0.5, 0.4, 0.2, 0.6])), torch.tensor([0.4, 0.1, 0.6, 0.7]))


def test_iou_and_giou_against_hand_computed_values():
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0]])
    b = torch.tensor([
        [0.0, 0.0, 2.0, 2.0],  # the same box: IoU 1, GIoU 1
        [1.0, 1.0, 3.0, 3.0],  # overlap 1, union 7, hull 9: IoU 1/7, GIoU 1/7 - 2/9
        [3.0, 0.0, 4.0, 2.0],  # disjoint: union 6, hull 4 x 2 = 8: GIoU -2/8
        [0.5, 0.5, 1.5, 1.5],  # nested: IoU 1/4, the hull is a itself: GIoU 1/4
        [10.0, 10.0, 11.0, 11.0],  # far away: union 5, hull 121: GIoU -116/121
    ])
    iou, union = box_iou(a, b)
    torch.testing.assert_close(iou[0], torch.tensor([1.0, 1 / 7, 0.0, 0.25, 0.0]))
    torch.testing.assert_close(union[0], torch.tensor([4.0, 7.0, 6.0, 4.0, 5.0]))
    torch.testing.assert_close(generalized_box_iou(a, b)[0],
                               torch.tensor([1.0, 1 / 7 - 2 / 9, -0.25, 0.25, -116 / 121]))
    assert generalized_box_iou(b, b).shape == (5, 5)
    with pytest.raises(ValueError, match="x1 >= x0"):
        generalized_box_iou(a, torch.tensor([[2.0, 0.0, 1.0, 1.0]]))


# --- matcher -----------------------------------------------------------------------------------------------


def random_outputs(b, q, k, generator):
    return {"logits": torch.randn(b, q, k + 1, generator=generator),
            "boxes": torch.rand(b, q, 4, generator=generator) * 0.5 + 0.1}


def random_targets(sizes, k, generator):
    return [{"labels": torch.randint(k, (n,), generator=generator),
             "boxes": torch.rand(n, 4, generator=generator) * 0.5 + 0.1} for n in sizes]


def test_matcher_finds_the_optimal_assignment_by_brute_force():
    gen = torch.Generator().manual_seed(0)
    matcher = HungarianMatcher()
    for q, n in [(4, 3), (5, 5), (6, 2), (3, 1)]:
        outputs, targets = random_outputs(1, q, 3, gen), random_targets([n], 3, gen)
        cost = matcher.cost(outputs["logits"][0], outputs["boxes"][0], targets[0]["labels"], targets[0]["boxes"])
        rows, cols = matcher(outputs, targets)[0]
        got = cost[rows, cols].sum()
        best = min(sum(cost[p[j], j] for j in range(n)) for p in itertools.permutations(range(q), n))
        torch.testing.assert_close(got, best)
        assert sorted(cols.tolist()) == list(range(n)) and len(set(rows.tolist())) == n


def test_matcher_batched_equals_one_image_at_a_time_and_handles_images_without_objects():
    gen = torch.Generator().manual_seed(1)
    matcher = HungarianMatcher()
    sizes = [3, 0, 5, 1]
    outputs, targets = random_outputs(4, 6, 4, gen), random_targets(sizes, 4, gen)
    batched = matcher(outputs, targets)
    for i, (rows, cols) in enumerate(batched):
        single = matcher({k: v[i : i + 1] for k, v in outputs.items()}, targets[i : i + 1])[0]
        assert torch.equal(rows, single[0]) and torch.equal(cols, single[1])
        assert len(rows) == sizes[i]
    empty = matcher(outputs, random_targets([0, 0, 0, 0], 4, gen))
    assert all(len(r) == len(c) == 0 for r, c in empty)


def test_matcher_cost_weights_class_l1_and_giou():
    logits = torch.tensor([[2.0, 0.0, 0.0]])  # (1 prediction, 2 classes + no object)
    boxes, target = torch.tensor([[0.5, 0.5, 0.2, 0.2]]), torch.tensor([[0.6, 0.5, 0.2, 0.2]])
    p = logits.softmax(-1)[0, 1]
    giou = generalized_box_iou(cxcywh_to_xyxy(boxes), cxcywh_to_xyxy(target))[0, 0]
    cost = HungarianMatcher(1, 5, 2).cost(logits, boxes, torch.tensor([1]), target)
    torch.testing.assert_close(cost[0, 0], -p + 5 * 0.1 - 2 * giou)


# --- the set loss ------------------------------------------------------------------------------------------


def test_set_loss_parts_by_hand_with_the_no_object_class_down_weighted():
    # Two queries, one object; query 1 predicts it exactly, query 0 must say "no object" (class 2).
    logits = torch.tensor([[[0.5, 0.2, 0.1], [0.3, 2.0, -1.0]]])
    boxes = torch.tensor([[[0.2, 0.2, 0.1, 0.1], [0.6, 0.5, 0.2, 0.4]]])
    targets = [{"labels": torch.tensor([1]), "boxes": torch.tensor([[0.6, 0.5, 0.2, 0.4]])}]
    losses = SetCriterion(2, eos_coef=0.1)({"logits": logits, "boxes": boxes}, targets)
    logp = logits[0].log_softmax(-1)
    ce = -(0.1 * logp[0, 2] + 1.0 * logp[1, 1]) / (0.1 + 1.0)  # weighted mean over queries
    torch.testing.assert_close(losses["ce"], ce)
    torch.testing.assert_close(losses["bbox"], torch.tensor(0.0))
    torch.testing.assert_close(losses["giou"], torch.tensor(0.0), atol=1e-6, rtol=0)
    torch.testing.assert_close(losses["loss"], ce, atol=1e-6, rtol=0)


def test_set_loss_adds_every_auxiliary_layer_and_normalises_boxes_by_their_number():
    gen = torch.Generator().manual_seed(2)
    last, aux = random_outputs(2, 5, 3, gen), [random_outputs(2, 5, 3, gen) for _ in range(2)]
    targets = random_targets([2, 3], 3, gen)
    crit = SetCriterion(3)
    losses = crit({**last, "aux": aux}, targets)
    parts = [crit.layer_losses(o, targets, num_boxes=5) for o in (last, *aux)]
    total = sum(p["ce"] + 5 * p["bbox"] + 2 * p["giou"] for p in parts)
    torch.testing.assert_close(losses["loss"], total)
    assert {"ce_0", "bbox_1", "giou_1"} <= set(losses)
    no_objects = crit({**last, "aux": aux}, random_targets([0, 0], 3, gen))  # only "no object" to learn
    assert no_objects["bbox"] == 0 and no_objects["giou"] == 0 and no_objects["ce"] > 0
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\)"):
        crit(last, [{"labels": torch.tensor([3]), "boxes": torch.rand(1, 4)}, targets[1]])


# --- the model ---------------------------------------------------------------------------------------------


def test_outputs_have_the_same_kind_with_and_without_a_mask():
    model = tiny()
    images = torch.randn(2, 3, 96, 64)
    for mask in (None, torch.ones(2, 96, 64, dtype=torch.bool)):
        out = model(images, mask)
        assert set(out) == {"logits", "boxes", "aux"}
        assert out["logits"].shape == (2, 8, 5) and out["boxes"].shape == (2, 8, 4)
        assert len(out["aux"]) == 1 and out["aux"][0]["boxes"].shape == (2, 8, 4)
        assert ((out["boxes"] > 0) & (out["boxes"] < 1)).all()
    torch.testing.assert_close(model(images)["logits"], model(images, torch.ones(2, 96, 64))["logits"])


def test_padding_is_hidden_from_attention_and_from_the_positions():
    # An image padded into a batch with a larger one: whatever the backbone gives at the padded feature
    # positions, the detections equal those of the image alone. (The convolutions themselves see the padding
    # near the border, in DETR too; here their output is fixed to isolate the Transformer's part.)
    torch.manual_seed(0)
    model = tiny()
    small = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        features = model.backbone(small)  # (1, 128, 2, 3)
        alone = model(small)
    padded = torch.randn(2, 128, 4, 4) * 3  # (2, 128, 4, 4): garbage wherever image 0 is padding
    padded[0, :, :2, :3] = features[0]
    handle = model.backbone.register_forward_hook(lambda module, args, out: padded)
    mask = torch.zeros(2, 128, 128, dtype=torch.bool)
    mask[0, :64, :96], mask[1] = True, True
    with torch.no_grad():
        together = model(torch.zeros(2, 3, 128, 128), mask)
    handle.remove()
    torch.testing.assert_close(together["logits"][0], alone["logits"][0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(together["boxes"][0], alone["boxes"][0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(together["aux"][0]["boxes"][0], alone["aux"][0]["boxes"][0], atol=1e-5, rtol=1e-4)


def test_bad_inputs_raise_errors_naming_the_argument():
    model = tiny()
    with pytest.raises(ValueError, match=r"images must be \(B, 3, H, W\) with 3 channels, got shape \(2, 1, 64, 64\)"):
        model(torch.randn(2, 1, 64, 64))
    with pytest.raises(ValueError, match="images must be"):
        model(torch.randn(3, 64, 64))
    with pytest.raises(ValueError, match=r"pixel_mask must be \(B, H, W\) = \(2, 64, 64\)"):
        model(torch.randn(2, 3, 64, 64), torch.ones(2, 32, 32))
    with pytest.raises(ValueError, match="backbone_widths"):
        aiayn.preset("detr-tiny", backbone_widths=(16, 32))
    with pytest.raises(ValueError, match="d_model=66 must be a multiple of 4"):
        aiayn.preset("detr-tiny", d_model=66, n_heads=2)
    outputs = {"logits": torch.randn(1, 3, 3), "boxes": torch.rand(1, 3, 4)}
    one = {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.5, 0.2, 0.2]])}
    for bad, message in [({"labels": torch.tensor([0, 1])}, r"targets\[0\]\['boxes'\] must be \(n, 4\) with n = 2"),
                         ({"boxes": torch.tensor([[0.5, 0.5]])}, r"must be \(n, 4\) with n = 1 labels, got \(1, 2\)"),
                         ({"labels": torch.tensor([1.0])}, r"\['labels'\] must be \(n,\) integer class ids"),
                         ({"boxes": torch.tensor([[50.0, 40.0, 20.0, 20.0]])}, "normalised to \\[0, 1\\]")]:
        with pytest.raises(ValueError, match=message):
            SetCriterion(2)(outputs, [{**one, **bad}])
    with pytest.raises(ValueError, match=r"sizes must be one \(height, width\) per image, \(2, 2\)"):
        postprocess({"logits": torch.randn(2, 3, 3), "boxes": torch.rand(2, 3, 4)}, sizes=[(100, 200)])
    nan = torch.tensor([[0.0, 0.0, 1.0, float("nan")]])
    with pytest.raises(FloatingPointError, match="NaN"):
        generalized_box_iou(nan, nan)


def test_every_trained_parameter_gets_a_gradient_and_frozen_ones_none():
    model = tiny().train()
    gen = torch.Generator().manual_seed(0)
    out = model(torch.randn(2, 3, 64, 64))
    SetCriterion(4)(out, random_targets([2, 1], 4, gen))["loss"].backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing
    frozen = tiny(backbone_frozen_stages=1)
    assert not frozen.backbone.conv1.weight.requires_grad
    assert not frozen.backbone.stages[0][0].conv1.weight.requires_grad
    assert frozen.backbone.stages[1][0].conv1.weight.requires_grad


def test_detr_r50_has_the_papers_41m_parameters():
    # Table 1: 41M. 41,302,368 are trained (DETR's main.py counts those); the frozen stem and stage 1 add 222,400.
    with torch.device("meta"):
        model = aiayn.build("detr-r50")
    assert aiayn.count_parameters(model) == 41_524_768
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 41_302_368
    assert model.cfg.stride == 32


def test_save_and_load_round_trip(tmp_path):
    model = tiny()
    aiayn.save(model, tmp_path)
    loaded = aiayn.load(tmp_path).eval()
    images = torch.randn(1, 3, 64, 64)
    torch.testing.assert_close(loaded(images)["boxes"], model(images)["boxes"])
    assert loaded.cfg == model.cfg and isinstance(loaded.cfg.backbone_widths, tuple)


def test_postprocess_scales_boxes_and_leaves_out_no_object():
    logits = torch.tensor([[[0.0, 3.0, 5.0]]])  # "no object" most likely; the best real class is 1
    out = postprocess({"logits": logits, "boxes": torch.tensor([[[0.5, 0.5, 0.5, 0.2]]])}, sizes=[(100, 200)])
    assert out[0]["labels"].tolist() == [1]
    torch.testing.assert_close(out[0]["scores"], logits.softmax(-1)[0, :, 1])
    torch.testing.assert_close(out[0]["boxes"], torch.tensor([[50.0, 40.0, 150.0, 60.0]]))
