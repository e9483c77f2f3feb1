"""Every function that runs a saved run's model takes ``device=``: ``"cpu"`` and ``torch.device("cpu")`` give exactly
what the default gives on a machine without a GPU, a device the machine lacks is refused naming the device before
anything is written, and (with a CUDA GPU) a GPU translates and decodes greedily as the CPU does."""

import math

import pytest
import torch

import aiayn
from aiayn.recipes import detect, image, lm, mlm, translation
from aiayn.training.device import resolve
from aiayn.viz import files

CPUS = ["cpu", torch.device("cpu")]
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
AUTO_IS_CPU = resolve(None).type == "cpu"  # no GPU: the default device is the CPU


def same_for_every_cpu_spelling(call):
    """``call(options)`` with no device, ``device="cpu"`` and ``device=torch.device("cpu")``: the results must agree
    (where the default is a GPU, the two CPU spellings alone); the first is returned."""
    default = call({}) if AUTO_IS_CPU else call({"device": "cpu"})
    for where in CPUS:
        assert call({"device": where}) == default, where
    return default


@pytest.mark.skipif(not AUTO_IS_CPU, reason="this machine has a GPU")
def test_auto_is_the_cpu_here_and_loaded_models_land_there(runs):
    model, _, _ = translation.load_run(runs["translation"])
    assert next(model.parameters()).device == torch.device("cpu") and not model.training
    for where in CPUS:
        assert next(lm.load_lm_run(runs["lm"], device=where)[0].parameters()).device.type == "cpu"
        assert next(mlm.load_bert(runs["mlm"], device=where)[0].parameters()).device.type == "cpu"


def test_translation_functions_give_the_same_output_on_every_cpu_spelling(runs, inputs, tmp_path):
    run, sources = runs["translation"], [s for s, _ in inputs["pairs"]]
    hyps = same_for_every_cpu_spelling(lambda kw: translation.translate(run, sources, **kw))
    assert len(hyps) == len(sources) and all(isinstance(h, str) for h in hyps)
    assert same_for_every_cpu_spelling(lambda kw: translation.translate(run, sources, beam=2, **kw))
    scores = same_for_every_cpu_spelling(lambda kw: translation.evaluate(run, [str(inputs["tsv"])], beam=1, **kw))
    assert scores["exact_match"] == sum(h == t for h, (_, t) in zip(hyps, inputs["pairs"])) / len(hyps)

    def page(kw):
        path = tmp_path / f"page-{len(kw)}-{kw.get('device')!s}.html"
        files.attention_page(run, sources[0], path, **kw)
        return path.read_text()

    same_for_every_cpu_spelling(page)

    def pictures(kw):  # a short given target keeps the pictures small
        out = tmp_path / f"pictures-{len(kw)}-{kw.get('device')!s}"
        return [p.name for p in files.attention_pictures(run, "abc", out, target="ab", **kw)]

    assert same_for_every_cpu_spelling(pictures) == ["attention-encoder.png", "attention-decoder.png",
                                                     "attention-cross.png"]
    drawn = files.viz("attention", tmp_path / "viz", run=run, text="abc", target="ab", device="cpu")
    assert [p.name for p in drawn] == ["attention-encoder.png", "attention-decoder.png", "attention-cross.png"]


def test_lm_functions_give_the_same_output_on_every_cpu_spelling(runs, inputs):
    run = runs["lm"]
    greedy = same_for_every_cpu_spelling(
        lambda kw: list(lm.generate(run, "1 May 1990 =", max_new_tokens=12, do_sample=False, **kw)))
    assert greedy and all(isinstance(p, str) for p in greedy)
    assert same_for_every_cpu_spelling(  # a seeded sample: the generator lives on the model's device
        lambda kw: "".join(lm.generate(run, "1 May", max_new_tokens=12, do_sample=True, temperature=0.8, seed=3, **kw)))
    scores = same_for_every_cpu_spelling(lambda kw: lm.perplexity(run, inputs["text"], **kw))
    assert scores["tokens"] > 0 and math.isclose(scores["perplexity"], math.exp(scores["loss"]))


def test_mlm_functions_give_the_same_output_on_every_cpu_spelling(runs, inputs):
    run, texts = runs["mlm"], ["monday, 1 may 1990", "2001-02-03", "another line"]
    default = mlm.embed(run, texts) if AUTO_IS_CPU else mlm.embed(run, texts, device="cpu")
    assert default.shape[0] == 3 and default.device.type == "cpu"
    for where in CPUS:
        assert torch.equal(mlm.embed(run, texts, device=where), default)
        # in batches of 2: padded to other lengths, so equal to float rounding (not bit for bit on every CPU)
        torch.testing.assert_close(mlm.embed(run, texts, 2, device=where), default, rtol=1e-5, atol=1e-6)
    if AUTO_IS_CPU:
        assert torch.equal(aiayn.embed(run, texts), default)  # the package's shortcut keeps its positional arguments
    assert mlm.embed(run, [], device="cpu").shape == (0, default.shape[1])
    scores = same_for_every_cpu_spelling(lambda kw: mlm.masked_accuracy(run, inputs["text"], **kw))
    assert scores["pairs"] == 11


def test_image_functions_give_the_same_output_on_every_cpu_spelling(runs, inputs):
    run = runs["image"]
    top = same_for_every_cpu_spelling(lambda kw: image.classify(run, inputs["images"], top=2, **kw))
    assert [len(r["top"]) for r in top] == [2, 2]
    scores = same_for_every_cpu_spelling(lambda kw: image.image_accuracy(run, inputs["mnist"], **kw))
    assert scores["n"] == 8 and sum(map(sum, scores["confusion"])) == 8


def test_detect_functions_give_the_same_output_on_every_cpu_spelling(runs, inputs, tmp_path):
    run = runs["detect"]

    def found(kw):
        out = tmp_path / f"found-{len(kw)}-{kw.get('device')!s}.png"
        result = detect.detect(run, inputs["shapes"], threshold=0.0, out=out, verbose=False, **kw)
        assert result["image"] == out and out.is_file()
        return result["detections"]

    detections = same_for_every_cpu_spelling(found)
    assert detections and all(0 <= d["box"][0] <= d["box"][2] <= 64 for d in detections)
    scores = same_for_every_cpu_spelling(lambda kw: detect.evaluate_voc(run, inputs["voc"], **kw))
    assert scores["n"] == 3 and 0 <= scores["map"] <= scores["map50"] <= 1 and scores["val_loss"] > 0


def test_every_run_of_the_fixture_trained_validated_and_finished(runs):
    """The recipes' validation and final evaluation moved their held-out batches (or did nothing on the CPU)."""
    import json

    for task, run in runs.items():
        record = json.loads((run / "run.json").read_text())
        assert record["steps"] == 3 and math.isfinite(record["final_loss"]), task
    assert (runs["image"] / "confusion.png").is_file() and (runs["translation"] / "attention.png").is_file()


def test_a_device_name_no_machine_has_is_refused_naming_it(runs, inputs, tmp_path):
    for bad in ("gpu", "cuda:x", "tpu"):
        with pytest.raises(ValueError, match="device="):
            translation.translate(runs["translation"], ["abc"], device=bad)
    with pytest.raises(ValueError, match="device="):
        lm.perplexity(runs["lm"], inputs["text"], device="cpus")


@no_gpu
def test_cuda_is_refused_on_a_machine_without_one(runs, inputs, tmp_path):
    calls = {
        "load_run": lambda d: translation.load_run(runs["translation"], device=d),
        "translate": lambda d: translation.translate(runs["translation"], ["abc"], device=d),
        "evaluate": lambda d: translation.evaluate(runs["translation"], [str(inputs["tsv"])], beam=1, device=d),
        "attention_pictures": lambda d: files.attention_pictures(runs["translation"], "abc", tmp_path / "a", device=d),
        "attention_page": lambda d: files.attention_page(runs["translation"], "abc", tmp_path / "a.html", device=d),
        "viz": lambda d: files.viz("attention", tmp_path / "v", run=runs["translation"], text="abc", device=d),
        "load_lm_run": lambda d: lm.load_lm_run(runs["lm"], device=d),
        "generate": lambda d: list(lm.generate(runs["lm"], "1 May", max_new_tokens=3, device=d)),
        "perplexity": lambda d: lm.perplexity(runs["lm"], inputs["text"], device=d),
        "load_bert": lambda d: mlm.load_bert(runs["mlm"], device=d),
        "embed": lambda d: mlm.embed(runs["mlm"], ["abc"], device=d),
        "masked_accuracy": lambda d: mlm.masked_accuracy(runs["mlm"], inputs["text"], device=d),
        "classify": lambda d: image.classify(runs["image"], inputs["images"], device=d),
        "image_accuracy": lambda d: image.image_accuracy(runs["image"], inputs["mnist"], device=d),
        "detect": lambda d: detect.detect(runs["detect"], inputs["shapes"], out=tmp_path / "d.png", verbose=False,
                                          device=d),
        "evaluate_voc": lambda d: detect.evaluate_voc(runs["detect"], inputs["voc"], device=d),
    }
    for name, call in calls.items():
        for where in ("cuda", "cuda:0", torch.device("cuda")):
            try:
                call(where)
            except ValueError as e:
                assert "device='cuda" in str(e), (name, where, e)
            else:
                pytest.fail(f"{name}(device={where!r}) ran on a machine without CUDA")
    assert not any(tmp_path.iterdir())  # refused before anything was written


@pytest.fixture
def exact_cuda():
    """CUDA matmuls in full float32 (training turns TF32 on), so that the GPU's numbers are the CPU's but for
    rounding in the last bits."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.gpu
@gpu
def test_a_gpu_translates_as_the_cpu_does(runs, inputs, exact_cuda):
    run, sources = runs["translation"], [s for s, _ in inputs["pairs"]]
    model = translation.load_run(run, device="cuda")[0]
    assert next(model.parameters()).device.type == "cuda"
    on_gpu = translation.translate(run, sources, device="cuda")
    on_cpu = translation.translate(run, sources, device="cpu")
    assert on_gpu == on_cpu  # text for text
    assert translation.translate(run, sources, beam=2, device="cuda") == translation.translate(
        run, sources, beam=2, device="cpu")


@pytest.mark.gpu
@gpu
def test_a_gpu_decodes_greedily_as_the_cpu_does(runs, exact_cuda):
    from aiayn.decoding import sample

    run, prompts = runs["lm"], ["1 May 1990 =", "tuesday, march 5th, 2019 ="]
    ids = {}
    for where in ("cuda", "cpu"):
        model, tok = lm.load_lm_run(run, device=where)
        ids[where] = sample(model, [tok.encode(p) for p in prompts], 20, temperature=0.0, eos_id=tok.eos_id)
    assert ids["cuda"] == ids["cpu"]  # token for token
    pieces = {where: list(lm.generate(run, prompts[0], max_new_tokens=20, do_sample=False, device=where))
              for where in ("cuda", "cpu")}
    assert pieces["cuda"] == pieces["cpu"]
