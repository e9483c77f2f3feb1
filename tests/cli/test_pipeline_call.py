"""``aiayn.pipeline`` as a ``transformers`` user types it: task names as ``transformers`` spells them
(``pipeline("translation", model=folder)``, ``p.task``), and calling the pipeline answers in the shapes a
``transformers`` pipeline of that task answers in, built from the methods that answer as the commands do."""

import pytest

import aiayn
from aiayn.pipelines import METHODS

pytestmark = pytest.mark.usefixtures("one_thread")

TASKS = {"translation": "translation", "lm": "text-generation", "mlm": "feature-extraction",
         "image": "image-classification", "detect": "object-detection", "denoise": "translation"}


def test_each_run_names_its_task_as_transformers_does_and_a_wrong_one_is_refused(runs):
    assert set(TASKS.values()) <= set(METHODS)
    for kind, task in TASKS.items():
        assert aiayn.pipeline(runs[kind]).task == task
        assert aiayn.pipeline(task, model=runs[kind]).task == task == aiayn.pipeline(runs[kind], task=task).task
    with pytest.raises(ValueError, match=r"task='translation', but .* a text-generation model"):
        aiayn.pipeline("translation", model=runs["lm"])
    with pytest.raises(ValueError, match="task must be one of"):
        aiayn.pipeline("summarization", model=runs["lm"])
    with pytest.raises(ValueError, match=r"'translation' is a task: name the model too"):
        aiayn.pipeline("translation")
    with pytest.raises(ValueError, match="name the task once"):
        aiayn.pipeline("translation", model=runs["translation"], task="translation")


def test_calling_a_translation_or_generation_pipeline_answers_as_transformers_does(runs, inputs):
    texts = [s for s, _ in inputs["pairs"][:3]]
    p = aiayn.pipeline("translation", model=runs["translation"])
    assert p(texts[0]) == [{"translation_text": p.translate(texts[0])}]
    assert p(texts, num_beams=3) == [{"translation_text": t} for t in p.translate(texts, beam=3)]
    two = p(texts, num_beams=3, num_return_sequences=2)
    assert two == [[{"translation_text": t} for t in n] for n in p.translate(texts, beam=3, num_return_sequences=2)]
    g = aiayn.pipeline("text-generation", model=runs["lm"])
    prompts = ["1 May", "12"]
    made = g.generate(prompts, max_new_tokens=6, do_sample=False)
    assert g(prompts[0], max_new_tokens=6, do_sample=False) == [{"generated_text": prompts[0] + made[0]}]
    assert g(prompts, max_new_tokens=6, do_sample=False, return_full_text=False) == [
        [{"generated_text": t}] for t in made]
    drawn = g(prompts[0], max_new_tokens=4, num_return_sequences=3, seed=1)
    assert len(drawn) == 3 and all(d["generated_text"].startswith(prompts[0]) for d in drawn)


def test_calling_an_image_embedding_or_detection_pipeline_answers_as_transformers_does(runs, inputs):
    p = aiayn.pipeline("image-classification", model=runs["image"])
    best = p(inputs["images"][0])  # transformers' default: the 5 most likely classes
    found = p.classify(inputs["images"][:1], top=5)[0]
    assert best == [{"label": c["class"], "score": c["probability"]} for c in found["top"]] and len(best) == 5
    assert best[0] == {"label": found["label"], "score": found["score"]}
    assert [len(r) for r in p(inputs["images"], top_k=2)] == [2] * len(inputs["images"])
    e = aiayn.pipeline("feature-extraction", model=runs["mlm"])
    assert e(["1 May 1990", "2 June"]) == e.embed(["1 May 1990", "2 June"]).tolist()
    assert e("1 May 1990") == e.embed("1 May 1990").tolist()
    d = aiayn.pipeline("object-detection", model=runs["detect"])
    boxes = d(inputs["shapes"], threshold=0.0)
    assert boxes and boxes == [{"score": b["score"], "label": b["name"], "box": dict(zip(
        ("xmin", "ymin", "xmax", "ymax"), b["box"]))} for b in d.detect([inputs["shapes"]], threshold=0.0)[0]]
