"""Every generation setting at every door: checked once (:mod:`aiayn.decoding.settings`), in the same words,
named the door's way. Python raises a ``ValueError`` naming the argument; the server answers 400 naming the field
(never a 5xx, never a hang); the command line exits 2 naming the flag (``test_bad_inputs.py``'s table).

The server is driven in-process (its ASGI app, lifespan and worker thread included) by hypothesis, which draws
each field of each request from the values a hostile client would send: wrong types, booleans for numbers, NaN,
infinities, subnormals, huge and negative numbers, empty and invalid Unicode strings."""

import time

import pytest
import torch

import aiayn
from aiayn.decoding.settings import CEILINGS, MIN_TEMPERATURE, SettingError, check
from aiayn.defaults import MAX_WAIT_MS

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from aiayn.serve import Settings, make_app  # noqa: E402

BAD = [  # (setting, value): each refused, naming the setting
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", -1.0), ("temperature", 1e-30),
    ("temperature", 5e-324), ("temperature", "0.5"), ("temperature", True), ("top_p", 0.0), ("top_p", 1.5),
    ("top_p", float("nan")), ("top_k", -1), ("top_k", 2.5), ("top_k", True), ("num_beams", 0),
    ("num_beams", CEILINGS["num_beams"] + 1), ("max_new_tokens", True), ("max_new_tokens", 0),
    ("max_new_tokens", CEILINGS["max_new_tokens"] + 1), ("repetition_penalty", 0.0),
    ("repetition_penalty", float("-inf")), ("length_penalty", float("nan")), ("no_repeat_ngram_size", -1),
    ("min_new_tokens", 1.0), ("seed", 2**64), ("num_return_sequences", 0),
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_each_bad_setting_is_refused_naming_it(name, value):
    with pytest.raises(SettingError) as e:
        check(do_sample=True, **{name: value})
    assert e.value.name == name and str(e.value).startswith(f"{name} must") and "got" in str(e.value)


def test_greedy_takes_temperature_zero_and_sampling_the_range():
    check(temperature=0.0)
    check(do_sample=False, temperature=1e-9)  # greedy reads no temperature (transformers' generate ignores it)
    check(do_sample=True, temperature=MIN_TEMPERATURE, top_p=1e-300, top_k=0)  # a tiny top_p keeps the top token


@pytest.fixture(scope="module")
def lm(runs):
    return aiayn.pipeline(runs["lm"], device="cpu")


@pytest.mark.parametrize("options", [{"temperature": float("nan")}, {"temperature": 1e-30}, {"top_p": float("nan")},
                                     {"max_new_tokens": True}, {"num_beams": 10_000}, {"top_k": True}],
                         ids=["nan-temperature", "tiny-temperature", "nan-top-p", "bool-tokens", "huge-beam",
                              "bool-top-k"])
def test_python_refuses_at_generate_and_at_the_pipeline(lm, options):
    """Before: a NaN temperature reached the kernel (a bare RuntimeError from multinomial), a tiny one overflowed
    the logits, ``True`` counted as one token, 10,000 beams ran for minutes."""
    name = next(iter(options))
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=name):
        lm.model.generate(ids, do_sample="num_beams" not in options, **{"max_new_tokens": 3, **options})
    with pytest.raises(ValueError, match=name):
        lm.generate("a", do_sample="num_beams" not in options, **{"max_new_tokens": 3, **options})


def test_a_prompt_and_new_tokens_past_the_positions_are_refused_not_cut(lm):
    """The server refused them (400 ``max_tokens``); the pipeline gave fewer tokens without a word. Asked for,
    they are refused the same way; the default is what the model has room for."""
    n = lm.model.cfg.max_len
    with pytest.raises(ValueError, match=rf"max_new_tokens is {n}, .* at most {n - 1}"):
        lm.generate("a", max_new_tokens=n, do_sample=False)
    assert lm.generate("a", max_new_tokens=n - 1, do_sample=False) is not None
    assert lm.generate("a", do_sample=False) is not None  # the default: the room there is


@pytest.fixture(scope="module")
def client(lm):
    with TestClient(make_app(lm, Settings(max_wait_ms=1.0, max_batch=4)), base_url="http://127.0.0.1") as c:
        yield c


NUMBERS = (st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
           | st.booleans() | st.none() | st.text(max_size=5) | st.lists(st.integers(), max_size=2))
TEXTS = (st.text(max_size=8) | st.sampled_from(["\ud800", "a\udfff", ""]) | st.integers() | st.none()
         | st.lists(st.text(max_size=4) | st.sampled_from(["\ud83d"]), max_size=3))
COMPLETION = st.fixed_dictionaries({"prompt": TEXTS}, optional={
    "max_tokens": NUMBERS, "temperature": NUMBERS, "top_p": NUMBERS, "top_k": NUMBERS, "seed": NUMBERS,
    "stop": TEXTS, "stream": st.booleans() | NUMBERS})


def answered(client, path, body):
    """POST ``body`` (JSON as Python writes it: NaN and infinities included) within a time bound: a 200, or a
    4xx whose error names a field of the body; never a 5xx."""
    import json

    start = time.monotonic()
    r = client.post(path, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=30)
    assert time.monotonic() - start < 30
    assert r.status_code < 500, (body, r.status_code, r.text)
    if r.status_code != 200:
        error = r.json()["error"]
        assert error["message"], body
        param = (error.get("param") or "").split("[")[0]
        assert param in body or (param == "" and r.status_code in (413, 503)), (body, r.text)
    return r


@hypothesis.settings(max_examples=60, deadline=None, database=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(body=COMPLETION)
def test_completions_answer_every_draw_with_an_answer_or_a_400_naming_the_field(client, body):
    if isinstance(body.get("max_tokens"), int) and not isinstance(body["max_tokens"], bool):
        body["max_tokens"] = max(1, min(body["max_tokens"], 4))  # bounded work: the big ones are drawn below
    answered(client, "/v1/completions", body)


@pytest.mark.parametrize(("field", "value"), [("temperature", 1e-30), ("temperature", 5e-324),
                                              ("temperature", float("nan")), ("max_tokens", True), ("top_k", True),
                                              ("max_tokens", CEILINGS["max_new_tokens"] + 1), ("prompt", "\ud800"),
                                              ("stop", "\udfff"), ("prompt", ["a", "\ud83d"])])
def test_completions_refuse_what_reached_a_kernel_before(client, field, value):
    r = answered(client, "/v1/completions", {"prompt": "a", "max_tokens": 2, field: value})
    assert r.status_code == 400 and r.json()["error"]["param"].split("[")[0] == field, r.text


def test_each_endpoint_refuses_text_that_is_not_unicode(runs):
    """A lone surrogate (a JSON ``\\ud800``) was a 500 at one endpoint and an empty 200 at another."""
    for kind, path, extra in (("copy", "/v1/translations", {}), ("lm", "/v1/completions", {"max_tokens": 2})):
        with TestClient(make_app(aiayn.pipeline(runs[kind], device="cpu")), base_url="http://127.0.0.1") as c:
            key = "prompt" if kind == "lm" else "input"
            for value in ("\ud800", ["ok", "x\udfffy"]):
                r = answered(c, path, {key: value, **extra})
                assert r.status_code == 400 and "Unicode" in r.text, r.text


def test_translations_refuse_a_beam_past_the_ceiling_or_the_vocabulary(runs):
    with TestClient(make_app(aiayn.pipeline(runs["copy"], device="cpu")), base_url="http://127.0.0.1") as c:
        vocab = c.app.state.server.pipe.model.cfg.tgt_vocab_size
        assert vocab < CEILINGS["num_beams"]  # the copy task's characters: a beam can be wider than them
        for beam in (CEILINGS["num_beams"] + 1, True, 2.0, vocab + 1):
            r = answered(c, "/v1/translations", {"input": "a b", "beam": beam})
            assert r.status_code == 400 and r.json()["error"]["param"] == "beam", r.text
        assert "vocabulary" in r.text
        assert answered(c, "/v1/translations", {"input": "a b", "beam": vocab}).status_code == 200


@pytest.mark.parametrize("wait", [float("nan"), float("inf"), -1.0, 1e12])
def test_server_settings_refuse_waits_that_never_end(wait):
    with pytest.raises(ValueError, match="max_wait_ms"):
        Settings(max_wait_ms=wait)
    Settings(max_wait_ms=0.0)  # the range's ends are taken
    Settings(max_wait_ms=MAX_WAIT_MS)


def test_a_good_completion_is_answered_beside_the_bad_ones(client):
    r = answered(client, "/v1/completions", {"prompt": "a", "max_tokens": 3, "temperature": 0.5, "seed": 1})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")


FLAG_VALUES = st.sampled_from(["nan", "inf", "-inf", "1e-320", "1e400", "-1", "0", "1", "2", "0.5", "3.7", "1e9",
                               "abc", "", "True", "0x10", "9" * 30])
NEVER = {"nan", "inf", "-inf", "1e400", "abc", "", "True", "0x10"}  # a value no numeric flag takes
COMMANDS = {  # each command's numeric flags, and what it reads
    "generate": (["--temperature", "--top-p", "--top-k", "--max-new-tokens", "--num-beams", "--repetition-penalty",
                  "--no-repeat-ngram-size", "--min-new-tokens", "--seed"], "lm", ["--prompt", "a"]),
    "translate": (["--beam", "--n-best", "--batch-size"], "copy", ["a b"]),
    "classify": (["--top"], "image", ["digit.npy"]),
    "embed": (["--batch-size"], "mlm", ["a b", "c"]),
    "detect": (["--threshold"], "detect", ["shapes.png", "--out", "found"]),
    "serve": (["--max-batch", "--max-wait-ms", "--max-queue", "--max-inputs", "--max-len", "--port"], "lm", []),
}


@hypothesis.settings(max_examples=80, deadline=None, database=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(command=st.sampled_from(sorted(COMMANDS)), data=st.data())
def test_every_numeric_flag_is_answered_or_refused_naming_it(runs, tmp_path_factory, capsys, monkeypatch, command,
                                                             data):
    """Each draw of a command's numeric flags: an answer (exit 0), or exit 2 with one line naming a flag drawn;
    never a traceback, and the run read is left as it was. ``serve`` is started up to the point where it would
    listen (uvicorn's ``run`` is a stand-in here)."""
    import numpy as np
    import uvicorn
    from reliability_kit import in_process, snapshot

    monkeypatch.setattr(uvicorn.Server, "run",  # the worker started (and warmed) before this: stop it
                        lambda self: self.config.app.state.server.worker.stop(timeout=5) or print("would listen"))
    flags, kind, rest = COMMANDS[command]
    if command == "serve":
        rest = [str(runs[kind])]
    drawn = data.draw(st.dictionaries(st.sampled_from(flags), FLAG_VALUES, min_size=1, max_size=3))
    run = runs[kind]
    cwd = tmp_path_factory.mktemp("door")
    from PIL import Image

    np.save(cwd / "digit.npy", np.zeros((28, 28), dtype=np.uint8))
    Image.fromarray(np.full((48, 48, 3), 128, dtype=np.uint8)).save(cwd / "shapes.png")
    before = snapshot(run)
    where = {"serve": [], "embed": ["--model", str(run)]}.get(command, ["--run", str(run)])
    argv = [command, *where, *rest,
            *(f"{flag}={value}" for flag, value in drawn.items())]
    result = in_process(argv, cwd, capsys)
    assert snapshot(run) == before
    assert result.returncode in (0, 2), (argv, result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, (argv, result.stderr)
    if set(drawn.values()) & NEVER:  # no flag takes these: a NaN temperature once sampled greedily, say
        assert result.returncode == 2, (argv, result.stdout)
    if result.returncode == 2:
        last = result.stderr.strip().splitlines()[-1]
        assert any(flag in last for flag in drawn), (argv, last)
    else:
        assert result.stdout.strip(), argv


@pytest.fixture(scope="module")
def translator(runs):
    with TestClient(make_app(aiayn.pipeline(runs["copy"], device="cpu"), Settings(max_wait_ms=1.0)),
                    base_url="http://127.0.0.1") as c:
        yield c


@hypothesis.settings(max_examples=40, deadline=None, database=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(body=st.fixed_dictionaries({"input": TEXTS}, optional={"beam": NUMBERS, "model": TEXTS}))
def test_translations_answer_every_draw_with_an_answer_or_a_400_naming_the_field(translator, body):
    answered(translator, "/v1/translations", body)


PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg==")  # 1 x 1, grey
IMAGES = (st.lists(st.sampled_from([PNG, "", "!!", "data:image/png;base64," + PNG, "aGVsbG8="]) | st.integers(),
                   max_size=3) | st.text(max_size=4) | st.none())
ENDPOINTS = {  # the run served, the endpoint, its fields
    "mlm": ("/v1/embeddings", st.fixed_dictionaries({"input": TEXTS}, optional={
        "encoding_format": TEXTS | st.sampled_from(["float", "base64"]), "dimensions": NUMBERS})),
    "image": ("/v1/classifications", st.fixed_dictionaries({"images": IMAGES}, optional={"top": NUMBERS})),
    "detect": ("/v1/detections", st.fixed_dictionaries({"images": IMAGES}, optional={"threshold": NUMBERS})),
}


@pytest.mark.parametrize("kind", sorted(ENDPOINTS))
def test_every_other_endpoint_answers_every_draw_with_an_answer_or_a_400_naming_the_field(runs, kind):
    path, bodies = ENDPOINTS[kind]
    with TestClient(make_app(aiayn.pipeline(runs[kind], device="cpu"), Settings(max_wait_ms=1.0)),
                    base_url="http://127.0.0.1") as c:

        @hypothesis.settings(max_examples=30, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(hypothesis.HealthCheck))
        @hypothesis.given(body=bodies)
        def draw(body):
            answered(c, path, body)

        draw()


def test_the_same_words_at_every_door(client, lm, runs, tmp_path, capsys):
    """A setting refused at each door says the same after its name (the review found the server's own words)."""
    from reliability_kit import in_process

    with pytest.raises(SettingError) as python:
        lm.generate("a", max_new_tokens=9000)
    r = answered(client, "/v1/completions", {"prompt": "a", "max_tokens": 9000})
    assert r.json()["error"]["message"] == f"max_tokens {python.value.reason}"
    cli = in_process(["generate", "--run", str(runs["lm"]), "--max-new-tokens", "9000"], tmp_path, capsys)
    assert cli.returncode == 2 and cli.stderr.strip().endswith(f"--max-new-tokens {python.value.reason}")
    with pytest.raises(SettingError, match=r"do_sample=False is greedy"):  # not "must be 0 ... got 0"
        lm.generate("a", do_sample=True, temperature=0)
    beams = in_process(["generate", "--run", str(runs["lm"]), "--prompt", "a", "--num-beams", "2", "--temperature",
                        "0.005", "--max-new-tokens", "2"], tmp_path, capsys)
    assert beams.returncode == 0, beams.stderr  # beams read no temperature, as in Python
