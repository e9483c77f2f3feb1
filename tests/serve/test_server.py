"""``aiayn serve`` live on the loopback: the official ``openai`` client against it, 32 concurrent clients getting
what 32 sequential pipeline calls give, bad requests named and survived, a full queue, clients that go away, and
every task's endpoint answering what its pipeline method answers."""

import asyncio
import base64
import io
import json
import re
import time

import httpx
import pytest
import torch

import aiayn
from aiayn.pipelines.base import Pipeline

pytestmark = pytest.mark.usefixtures("one_thread")


def greedy_text(p, prompt, n, stop=()):
    """What ``pipeline.generate`` gives one prompt at a time (greedy), cut at the first stop string."""
    text = p.generate(prompt, max_new_tokens=n, do_sample=False)
    hits = [text.index(s) for s in stop if s in text]
    return text[: min(hits)] if hits else text


def metric(text, name):
    """The sum of the samples of ``name`` (labels included in the name's pattern) in Prometheus text."""
    return sum(float(v) for v in re.findall(rf"^{name} (\S+)$", text, re.M))


def slowed(app, seconds=0.01):
    """Make each decoding step of the served LM take at least ``seconds`` (so a test can act mid-generation)."""
    batch = app.state.server.worker.batch
    step = batch.step
    batch.step = lambda: (time.sleep(seconds), step())[1]


def test_openai_client_completions_streaming_and_models(runs, serve):
    openai = pytest.importorskip("openai")
    p = aiayn.pipeline(runs["lm"], device="cpu")
    with serve(p) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
        assert [m.id for m in client.models.list()] == ["tiny"]
        want = greedy_text(p, "1 May", 12)
        done = client.completions.create(model="tiny", prompt="1 May", max_tokens=12, temperature=0)
        assert done.choices[0].text == want and done.object == "text_completion"
        assert done.usage.prompt_tokens == len(p.parts["tok"].encode("1 May"))
        assert done.usage.completion_tokens == 12 or done.choices[0].finish_reason == "stop"
        chunks = list(client.completions.create(model="tiny", prompt="1 May", max_tokens=12, temperature=0,
                                                stream=True, stream_options={"include_usage": True}))
        assert "".join(c.choices[0].text for c in chunks if c.choices) == want
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == done.choices[0].finish_reason
        assert chunks[-1].usage.total_tokens == done.usage.total_tokens
        two = client.completions.create(model="tiny", prompt=["1 May", "x"], max_tokens=5, temperature=0, stop=["y"])
        assert [c.text for c in sorted(two.choices, key=lambda c: c.index)] == [
            greedy_text(p, "1 May", 5, ["y"]), greedy_text(p, "x", 5, ["y"])]
        drawn = [client.completions.create(model="tiny", prompt="1 May", max_tokens=8, temperature=1.0, top_p=0.9,
                                           seed=7).choices[0].text for _ in range(2)]
        assert drawn[0] == drawn[1]  # one seed, one text (alone on the server)
        with pytest.raises(openai.BadRequestError, match="max_tokens"):
            client.completions.create(model="tiny", prompt="1 May", max_tokens=0)


def test_openai_client_embeddings(runs, serve):
    openai = pytest.importorskip("openai")
    p = aiayn.pipeline(runs["mlm"], device="cpu")
    texts = ["the 3rd of march 1999", "1999-03-03", "May"]
    with serve(p) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
        want = p.embed(texts)
        for form in (None, "float", "base64"):  # unless told, the client asks for base64 and decodes it
            got = client.embeddings.create(model="tiny", input=texts, **({"encoding_format": form} if form else {}))
            rows = [d.embedding for d in sorted(got.data, key=lambda d: d.index)]
            if form == "base64":  # asked for: handed over as sent, little-endian float32
                rows = [torch.frombuffer(bytearray(base64.b64decode(r)), dtype=torch.float32) for r in rows]
            torch.testing.assert_close(torch.stack([torch.as_tensor(r) for r in rows]), want, atol=1e-5, rtol=1e-5)
        assert got.usage.prompt_tokens > 0
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model="tiny", prompt="x")  # a BERT has no completions


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])  # aiayn serve --compile: slots
def test_32_concurrent_clients_get_the_texts_of_32_sequential_calls(runs, serve, compiled):
    p = aiayn.pipeline(runs["lm"], device="cpu")
    words = ["1 May", "x", "the 3rd of June 1999 =", "2001", "12 December 1987", "", "May 5", "abc"]
    asks = [(words[i % 8] + " " * (i // 8), 4 + (7 * i) % 29, ["y"] if i % 5 == 0 else []) for i in range(32)]
    want = [greedy_text(p, prompt, n, stop) for prompt, n, stop in asks]

    async def clients(url):
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            async def one(i, prompt, n, stop):
                await asyncio.sleep(0.002 * (i % 7))  # arrivals spread over a few steps: rows join mid-flight
                r = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0,
                                                          "stop": stop, "stream": i % 3 == 0})
                assert r.status_code == 200, r.text
                if i % 3:
                    return r.json()["choices"][0]["text"]
                events = [json.loads(line[6:]) for line in r.text.splitlines()
                          if line.startswith("data: ") and line != "data: [DONE]"]
                return "".join(e["choices"][0]["text"] for e in events)

            return await asyncio.gather(*(one(i, *a) for i, a in enumerate(asks)))

    p = Pipeline(p.task, p.model, p.source, compile=compiled, **p.parts)
    with serve(p, max_batch=8, max_wait_ms=5, max_len=64 if compiled else None) as (url, _):  # slots of 64 columns
        got = asyncio.run(clients(url))
        if compiled:  # what would not fit a slot is refused, naming the field
            r = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 80})
            assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens" and "64" in r.text
        text = httpx.get(f"{url}/metrics").text
    assert got == want
    steps = metric(text, "aiayn_batch_size_count")
    assert metric(text, 'aiayn_batch_size_bucket{le="1"}') < steps  # some steps decoded several rows
    assert metric(text, 'aiayn_requests_total{endpoint="/v1/completions",status="200"}') == 32
    assert metric(text, 'aiayn_tokens_total{kind="prompt"}') == sum(len(p.parts["tok"].encode(a[0]) or [0])
                                                                     for a in asks)


BAD = [  # body, status, the field named
    ({"prompt": 3}, 400, "prompt"),
    ({"prompt": ["a", 5]}, 400, "prompt[1]"),
    ({}, 400, "prompt"),
    ({"prompt": "a", "max_tokens": -1}, 400, "max_tokens"),
    ({"prompt": "a", "max_tokens": 10_000}, 400, "max_tokens"),
    ({"prompt": "a" * 300}, 400, "prompt"),
    ({"prompt": "a", "temperature": "hot"}, 400, "temperature"),
    ({"prompt": "a", "top_p": 0}, 400, "top_p"),
    ({"prompt": "a", "stop": 3}, 400, "stop"),
    ({"prompt": "a", "n": 17}, 400, "n"),  # more continuations than MOST_N
    ({"prompt": "a", "logit_bias": {"3": 5}}, 400, "logit_bias"),
    ({"prompt": "a", "stream": "yes"}, 400, "stream"),
    ({"prompt": "a", "frobnicate": 1}, 400, "frobnicate"),
    ({"prompt": "a", "model": "gpt-4"}, 404, "model"),
    ({"prompt": ["a"] * 65}, 413, "prompt"),
    ([1, 2], 400, None),
]


def test_bad_requests_get_a_4xx_naming_the_field_and_the_server_goes_on(runs, serve):
    p = aiayn.pipeline(runs["lm"], device="cpu")
    with serve(p, max_body=4096) as (url, _), httpx.Client(base_url=url, timeout=30) as c:
        for body, status, param in BAD:
            r = c.post("/v1/completions", json=body)
            assert r.status_code == status, (body, r.text)
            assert r.json()["error"]["param"] == param, (body, r.text)
        assert c.post("/v1/completions", content=b"{not json").json()["error"]["param"] == "body"
        r = c.post("/v1/completions", content=b'{"prompt": "' + b"a" * 5000 + b'"}')
        assert r.status_code == 413 and r.json()["error"]["param"] == "body"
        assert c.get("/v1/embeddings").status_code == 404 and c.get("/v1/completions").status_code == 405
        r = c.post("/v1/completions", json={"prompt": "1 May", "max_tokens": 5, "temperature": 0})
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == greedy_text(p, "1 May", 5)
        assert c.get("/health").json()["status"] == "ok"


def test_a_full_queue_answers_503_with_retry_after(runs, serve):
    p = aiayn.pipeline(runs["lm"], device="cpu")

    async def crowd(url):
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            return await asyncio.gather(*(c.post("/v1/completions", json={"prompt": "1 May", "max_tokens": 20})
                                          for _ in range(8)))

    with serve(p, max_batch=1, max_queue=2) as (url, app):
        r = httpx.post(f"{url}/v1/completions", json={"prompt": ["a", "b", "c"]})  # 3 rows never fit a queue of 2
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        slowed(app)
        answers = asyncio.run(crowd(url))
        assert {a.status_code for a in answers} == {200, 503}
        assert all(a.headers["Retry-After"] for a in answers if a.status_code == 503)
        assert httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200


def test_a_client_that_goes_away_frees_its_row(runs, serve):
    p = aiayn.pipeline(runs["lm"], device="cpu")
    ask = {"prompt": "x", "max_tokens": 200, "temperature": 0}
    with serve(p) as (url, app):
        slowed(app, 0.02)
        batch = app.state.server.worker.batch
        batch.ends = set()  # no end-of-text: a row runs its 200 steps unless it leaves

        def within(condition, seconds=5.0):
            """Whether ``condition()`` comes true within ``seconds`` (the worker thread changes the batch)."""
            deadline = time.monotonic() + seconds
            while not condition() and time.monotonic() < deadline:
                time.sleep(0.01)
            return condition()

        def freed():
            return within(lambda: not batch.rows)

        with httpx.Client(base_url=url, timeout=30) as c, c.stream(
                "POST", "/v1/completions", json={**ask, "stream": True}) as r:
            # the first piece came (sent by the prefill, a moment before the row is packed). The iterator is kept:
            # a dropped one is closed, and closing it closes the connection, which frees the row too early to see
            lines = r.iter_lines()
            next(lines)
            assert within(lambda: len(batch.rows) == 1)  # the row is decoding
        assert freed()  # long before its 200 steps (4 s here)
        with pytest.raises(httpx.ReadTimeout):  # not streamed: the same when the client gives up waiting
            httpx.post(f"{url}/v1/completions", json=ask, timeout=0.3)
        assert freed()
        text = httpx.get(f"{url}/metrics").text
        assert metric(text, 'aiayn_requests_total{endpoint="/v1/completions",status="499"}') == 2
        assert metric(text, "aiayn_batch_size_count") < 150


def png(picture):
    """The PNG bytes of a ``(C, H, W)`` uint8 picture, base64-encoded."""
    from PIL import Image

    array = picture.permute(1, 2, 0).squeeze(-1).numpy()
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_translations_answer_what_the_pipeline_translates(runs, serve):
    p = aiayn.pipeline(runs["translation"], device="cpu", compile=True)
    with pytest.raises(ValueError, match="serve it without compile"):  # batches of every shape: not compiled
        serve(p).__enter__()
    p = Pipeline(p.task, p.model, p.source, **p.parts)
    texts = ["abc def", "hello there", "x"]
    with serve(p, max_wait_ms=20) as (url, _), httpx.Client(base_url=url, timeout=30) as c:
        for beam in (1, 3):
            r = c.post("/v1/translations", json={"input": texts, "beam": beam})
            assert [d["text"] for d in r.json()["data"]] == p.translate(texts, beam=beam)
        assert c.post("/v1/translations", json={"input": texts, "beam": 0}).json()["error"]["param"] == "beam"
        r = c.post("/v1/translations", json={"input": ["a " * 400]})  # longer than the model reads
        assert r.status_code == 400 and "max_len" in r.json()["error"]["message"]


def test_image_classifications_and_detections_answer_what_the_pipeline_does(runs, serve):
    from aiayn.data.images import synthetic_digits

    digits, _ = synthetic_digits(3, seed=1)  # (N, 1, 28, 28) uint8
    p = aiayn.pipeline(runs["image"], device="cpu")
    with serve(p) as (url, _), httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/v1/classifications", json={"images": [png(d) for d in digits], "top": 2})
        want = p.classify([d.float() / 255 for d in digits], top=2)
        got = r.json()["data"]
        assert [g["label"] for g in got] == [w["label"] for w in want]
        assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], abs=1e-4)
        r = c.post("/v1/classifications", json={"images": ["bm90IGFuIGltYWdl"]})  # "not an image"
        assert r.status_code == 400 and r.json()["error"]["param"] == "images[0]"
        assert c.post("/v1/classifications", json={"images": ["%%%"]}).json()["error"]["param"] == "images[0]"
    from aiayn.data.detection import draw_shapes

    numpy = pytest.importorskip("numpy")
    picture, _ = draw_shapes(numpy.random.default_rng(5), size=48, max_objects=1)
    d = aiayn.pipeline(runs["detect"], device="cpu")
    with serve(d) as (url, _), httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/v1/detections", json={"images": [png(picture)], "threshold": 0.0})
        assert r.status_code == 200, r.text
        objects = r.json()["data"][0]["objects"]
        assert objects and {"label", "name", "score", "box"} <= set(objects[0])
        assert c.post("/v1/detections", json={"images": [png(picture)], "threshold": 1}).status_code == 400
