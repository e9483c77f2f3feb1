"""``aiayn.pipeline`` keeps a model loaded and answers what the commands print: for every task its outputs equal
the command's (``aiayn translate``, ``generate``, ``embed``, ``classify``, ``detect``) and the library function
behind it, in float32 and with ``quantize="int8"`` / ``--int8``; and it loads the model once."""

import json

import pytest
import torch
from torch import nn

import aiayn
import aiayn.layers.int8
from aiayn.cli import main
from aiayn.layers.int8 import Int8Linear, is_quantized
from aiayn.pipelines import detect, embed, image, lm, translation

pytestmark = pytest.mark.usefixtures("one_thread")


def int8_model(model, int8):
    """Whether ``model`` is what was asked for: every Linear an :class:`Int8Linear` (int8), or none (float32)."""
    linears = [m for m in model.modules() if isinstance(m, (nn.Linear, Int8Linear))]
    assert linears and is_quantized(model) == int8
    return all(isinstance(m, Int8Linear if int8 else nn.Linear) for m in linears)


@pytest.fixture
def quantized(monkeypatch):
    """The models ``aiayn.layers.int8.quantize`` made since the test began (one per int8 load, by any path)."""
    made, real = [], aiayn.layers.int8.quantize
    monkeypatch.setattr(aiayn.layers.int8, "quantize", lambda model: made.append(type(model).__name__) or real(model))
    return made


def printed(capsys, *argv):
    """What ``aiayn ARGV`` prints (standard output), asserting it succeeded."""
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
def test_translate_equals_the_command_and_the_function(runs, inputs, capsys, int8, quantized, monkeypatch):
    run, texts = runs["translation"], [s for s, _ in inputs["pairs"][:4]]
    p = aiayn.pipeline(run, quantize="int8" if int8 else None)
    assert p.task == "translation" and int8_model(p.model, int8)
    searches, real = [], translation.beam_search  # which model each beam search ran, with how many beams
    monkeypatch.setattr(translation, "beam_search", lambda model, src, beam=4, **k: searches.append(
        (model, beam)) or real(model, src, beam=beam, **k))
    for beam in (1, 3):
        searches.clear()
        got = p.translate(texts, beam=beam)
        assert [b for _, b in searches] == ([3] if beam == 3 else []) and all(m is p.model for m, _ in searches)
        assert got == translation.translate(run, texts, beam=beam, quantize="int8" if int8 else None)
        flags = ["--int8"] if int8 else []
        out = printed(capsys, "translate", "--run", run, "--beam", beam, *flags, *texts)
        assert out.splitlines() == [f"{s} -> {h}" for s, h in zip(texts, got)]
        assert [b for _, b in searches] == ([3] * 3 if beam == 3 else [])  # the function and the command searched
    assert quantized == (["Transformer"] * 5 if int8 else [])  # the pipeline, then each function and command


def test_a_compiled_translation_prints_the_eager_text(runs, inputs, capsys):
    """The compiled path through the pipeline and ``--compile``: the eager scores and, where the eager choice is
    clear of a tie (:mod:`margins`: this barely trained model's second hypotheses are near-ties, which another
    CPU's kernels may order otherwise), the eager tokens and text."""
    from aiayn.data.batching import seq2seq_batch
    from margins import MARGIN, assert_beams_agree, greedy_margins

    run, texts = runs["translation"], [s for s, _ in inputs["pairs"][:3]]
    eager = aiayn.pipeline(run)
    p = aiayn.pipeline("translation", model=run, compile=True)
    assert p.compile
    model, src_tok, tgt_tok = translation.load_run(run)
    src = seq2seq_batch([(t, "") for t in texts], src_tok, tgt_tok)[0]
    assert assert_beams_agree(model, src, beam=2, n=2, compile=True) >= 1
    clear = (greedy_margins(model, src) > MARGIN).tolist()
    assert any(clear)
    assert [t for t, c in zip(p.translate(texts), clear) if c] == [t for t, c in zip(eager.translate(texts), clear)
                                                                     if c]
    lines = [printed(capsys, "translate", "--run", run, *flags, *texts).splitlines()
             for flags in ([], ["--compile"], ["--int8"], ["--int8", "--compile"])]
    int8_model, _, _ = translation.load_run(run, quantize="int8")
    int8_clear = (greedy_margins(int8_model, src) > MARGIN).tolist()
    for (plain, compiled), ok in (((lines[0], lines[1]), clear), ((lines[2], lines[3]), int8_clear)):
        assert len(plain) == len(compiled) == len(texts)
        assert [a for a, c in zip(compiled, ok) if c] == [a for a, c in zip(plain, ok) if c]


def test_translate_n_best_gives_the_best_beams_best_first(runs, inputs, capsys):
    from aiayn.decoding import beam_search
    from aiayn.pipelines.translation import load_run

    run, texts = runs["translation"], [s for s, _ in inputs["pairs"][:3]]
    p = aiayn.pipeline(run)
    best = p.translate(texts, beam=3, num_return_sequences=3)
    assert [n[0] for n in best] == p.translate(texts, beam=3)  # the first is the one beam search gives
    model, src_tok, tgt_tok = load_run(run)
    for text in texts:  # each text alone: its 3 best beams, best first, as beam search ranks them
        ids = beam_search(model, torch.tensor([src_tok.encode(text) + [src_tok.eos_id]]), beam=3,
                          num_return_sequences=3)
        assert p.translate(text, beam=3, num_return_sequences=3) == [tgt_tok.decode(r) for r in ids.tolist()]
    assert p.translate(texts[0], beam=3, num_return_sequences=2) == p.translate(texts[0], beam=3,
                                                                               num_return_sequences=3)[:2]
    out = printed(capsys, "translate", "--run", run, "--beam", 3, "--n-best", 3, *texts)
    assert out.splitlines() == [f"{s} -> {h}" for s, n in zip(texts, best) for h in n]
    with pytest.raises(ValueError, match="num_return_sequences must be between 1 and beam=2"):
        p.translate(texts, beam=2, num_return_sequences=3)
    with pytest.raises(SystemExit):
        main(["translate", "--run", str(run), "--n-best", "2", "x"])
    assert "--n-best 2 needs a beam at least as wide" in capsys.readouterr().err


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
def test_generate_equals_the_command_and_streams_the_same_text(runs, capsys, int8, quantized):
    run, q = runs["lm"], "int8" if int8 else None
    p = aiayn.pipeline(run, quantize=q)
    assert p.task == "text-generation" and int8_model(p.model, int8)
    text = p.generate("1 May", max_new_tokens=12, do_sample=False)
    assert isinstance(text, str)
    assert text == "".join(lm.generate(run, "1 May", max_new_tokens=12, do_sample=False, quantize=q))
    assert "".join(p.generate("1 May", max_new_tokens=12, do_sample=False, stream=True)) == text
    assert p.generate(["1 May", "3 June"], max_new_tokens=5, seed=1) == [
        "".join(lm.generate(run, prompt, max_new_tokens=5, seed=1, quantize=q)) for prompt in ("1 May", "3 June")]
    flags = ["--int8"] if int8 else []
    out = printed(capsys, "generate", "--run", run, "--prompt", "1 May", "--max-new-tokens", 12, "--temperature", 0,
                  *flags)
    assert out == text + "\n"
    assert quantized == (["GPT"] * 5 if int8 else [])  # the pipeline, three function calls and the command


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
def test_embed_equals_the_command(runs, capsys, int8, quantized):
    run, q, texts = runs["mlm"], "int8" if int8 else None, ["one two", "three four five"]
    p = aiayn.pipeline(run, quantize=q)
    assert p.task == "feature-extraction" and int8_model(p.model, int8)
    vectors = p.embed(texts)
    torch.testing.assert_close(vectors, embed.embed(run, texts, quantize=q), rtol=0, atol=0)
    out = printed(capsys, "embed", "--model", run, *(["--int8"] if int8 else []), *texts)
    assert [json.loads(line) for line in out.splitlines()] == [[round(v, 6) for v in row] for row in vectors.tolist()]
    assert quantized == (["BERT"] * 3 if int8 else [])
    if int8:  # int8 rounding shows in the vectors: near the float ones, not equal to them
        float32 = aiayn.pipeline(run).embed(texts)
        assert not torch.equal(vectors, float32) and torch.allclose(vectors, float32, atol=0.05)


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
def test_classify_and_detect_equal_the_commands(runs, inputs, capsys, int8, tmp_path, quantized):
    q = "int8" if int8 else None
    p = aiayn.pipeline(runs["image"], quantize=q)
    assert p.task == "image-classification" and int8_model(p.model, int8)
    found = p.classify(inputs["images"], top=2)
    assert found == image.classify(runs["image"], inputs["images"], top=2, quantize=q)
    assert [r["top"] for r in aiayn.pipeline(runs["image"]).classify([image.read_image_file(inputs["images"][0])])] \
        == [image.classify(runs["image"], inputs["images"][:1])[0]["top"]]  # a tensor in: the same classes
    out = printed(capsys, "classify", "--run", runs["image"], "--top", 2, *(["--int8"] if int8 else []),
                  *inputs["images"])
    assert len(out.splitlines()) == 2 and out.splitlines()[0].startswith(f"{inputs['images'][0]}: ")
    assert len(quantized) == (3 if int8 else 0)  # the pipeline, the function and the command: float ones after
    p = aiayn.pipeline(runs["detect"], quantize=q)
    assert p.task == "object-detection" and int8_model(p.model, int8)
    boxes = p.detect([inputs["shapes"]], threshold=0.0)
    assert boxes == [detect.detect(runs["detect"], inputs["shapes"], threshold=0.0, out=tmp_path / "d.png",
                                   verbose=False, quantize=q)["detections"]]
    assert boxes[0], "a threshold of 0 keeps every query's box"
    assert len(quantized) == (5 if int8 else 0)


def test_the_model_is_loaded_once(runs, monkeypatch):
    from aiayn.models import checkpoint  # where every loader reads a saved model

    loads = []
    real = checkpoint.load
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: loads.append(a) or real(*a, **k))
    p = aiayn.pipeline(runs["translation"])
    for _ in range(3):
        p.translate(["abc"])
    assert len(loads) == 1


def test_a_pipeline_refuses_what_its_model_cannot_do_and_bad_options(runs):
    p = aiayn.pipeline(runs["lm"])
    with pytest.raises(ValueError, match="can generate, not translate"):
        p.translate(["abc"])
    with pytest.raises(ValueError, match="stream=True takes one prompt"):
        p.generate(["a", "b"], stream=True)
    with pytest.raises(ValueError, match="quantize='int4'"):
        aiayn.pipeline(runs["lm"], quantize="int4")
    with pytest.raises(ValueError, match="weights= is for translation runs"):
        aiayn.pipeline(runs["lm"], weights="average.safetensors")
    with pytest.raises(ValueError, match="compile=True compiles decoding"):
        aiayn.pipeline(runs["mlm"], compile=True)
    with pytest.raises(FileNotFoundError):
        aiayn.pipeline(runs["lm"] / "nothing")
    assert aiayn.pipeline(runs["denoise"]).task == "translation"
    with pytest.raises(ValueError, match="not a quantized one"):
        aiayn.save(aiayn.pipeline(runs["lm"], quantize="int8").model, runs["lm"].parent / "int8-copy")
    with pytest.raises(TypeError, match="images must be a list"):
        aiayn.pipeline(runs["image"]).classify("digit.png")
    with pytest.raises(TypeError, match="images must be a list of files"):
        aiayn.pipeline(runs["detect"]).detect("cells.png")
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        aiayn.pipeline(runs["mlm"]).embed(["a text"], batch_size=0)


def test_dtype_casts_a_decoding_model_and_refuses_what_it_cannot(runs, inputs, capsys):
    from aiayn.pipelines.lm import load_lm_run

    p = aiayn.pipeline(runs["lm"], device="cpu", dtype="bfloat16")
    assert {t.dtype for t in p.model.parameters()} == {torch.bfloat16}
    model, _ = load_lm_run(runs["lm"], device="cpu")
    tok = p.parts["tok"]
    prompt = tok.encode("1 May")
    by_hand = aiayn.decoding.sample(model.to(torch.bfloat16), [prompt], 8, temperature=0, eos_id=tok.eos_id)[0]
    assert p.generate("1 May", max_new_tokens=8, do_sample=False) == tok.decode(by_hand[len(prompt):])
    run, texts = runs["translation"], [s for s, _ in inputs["pairs"][:2]]
    half = aiayn.pipeline(run, dtype=torch.float16)
    assert printed(capsys, "translate", "--run", run, "--dtype", "float16", *texts).splitlines() == [
        f"{s} -> {h}" for s, h in zip(texts, half.translate(texts))]
    with pytest.raises(ValueError, match="dtype='bfloat16' is for text-generation and translation"):
        aiayn.pipeline(runs["mlm"], dtype="bfloat16")
    with pytest.raises(ValueError, match="int8 weights compute in float32"):
        aiayn.pipeline(runs["lm"], quantize="int8", dtype="bfloat16")
    with pytest.raises(ValueError, match="must be one of"):
        aiayn.pipeline(runs["lm"], dtype="float8")


def test_the_pipelines_take_generates_lengths(runs, inputs):
    """``max_length`` counts the prompt (a language model's) or the start token (a translation's), as ``generate``
    counts it; ``max_new_tokens`` wins where both are given, as in ``transformers``."""
    lm = aiayn.pipeline(runs["lm"])
    tok = lm.parts["tok"]
    prompt = "the 3rd of June"
    n = len(tok.encode(prompt))
    greedy = {"do_sample": False}
    assert lm.generate(prompt, max_length=n + 5, **greedy) == lm.generate(prompt, max_new_tokens=5, **greedy)
    assert lm.generate(prompt, max_length=n + 1, max_new_tokens=6, **greedy) == \
        lm.generate(prompt, max_new_tokens=6, **greedy)
    with pytest.raises(ValueError, match="max_length"):
        lm.generate(prompt, max_length=n, **greedy)
    p = aiayn.pipeline(runs["translation"])
    texts = [s for s, _ in inputs["pairs"][:3]]
    full = p.translate(texts)
    cut = p.translate(texts, max_new_tokens=2)
    ids = [p.parts["tgt_tok"].encode(t) for t in full]
    assert any(len(i) > 2 for i in ids)  # the cut shows
    assert [p.parts["tgt_tok"].encode(t) for t in cut] == [i[:2] for i in ids]  # greedy: the same first tokens
    assert p.translate(texts, max_length=3) == cut


def test_the_text_generation_pipeline_takes_generates_options(runs):
    """A ``generation_config`` and any of its fields, as ``generate`` takes them: the text of ``generate`` on the
    same ids; a keyword wins over the config's field; a name ``generate`` does not take is refused by name."""
    lm = aiayn.pipeline(runs["lm"])
    tok = lm.parts["tok"]
    prompt = "the 3rd of June"
    beams = aiayn.GenerationConfig(num_beams=3, num_return_sequences=2, length_penalty=0.0, max_new_tokens=6)
    got = lm.generate(prompt, generation_config=beams)
    ids = torch.tensor([tok.encode(prompt)])
    out = lm.model.generate(ids, generation_config=beams, eos_token_id=tok.eos_id).tolist()
    new = [row[ids.size(1):] for row in out]
    want = [tok.decode(r[:r.index(tok.eos_id)] if tok.eos_id in r else r) for r in new]
    assert got == want and len(got) == 2
    greedy = aiayn.GenerationConfig(do_sample=False, max_new_tokens=5)
    assert lm.generate(prompt, generation_config=greedy) == lm.generate(prompt, do_sample=False, max_new_tokens=5)
    assert lm.generate(prompt, generation_config=greedy, max_new_tokens=2) == \
        lm.generate(prompt, do_sample=False, max_new_tokens=2)
    assert lm.generate(prompt, generation_config=beams, num_return_sequences=1) == got[0]  # one text, not a list
    with pytest.raises(TypeError, match="stop_sequence"):
        lm.generate(prompt, stop_sequence="x")
