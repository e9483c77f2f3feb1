"""The HTTP application: a loaded :class:`~aiayn.pipelines.Pipeline` behind OpenAI-shaped endpoints.

    GET  /health /metrics /v1/models                      always
    POST /v1/completions      (stream: server-sent events)  a language model (continuous batching)
    POST /v1/chat/completions (stream: server-sent events)  the same model, the messages laid out by its chat
                                                            template (aiayn.data.chat)
    POST /v1/embeddings                                     a BERT (micro-batching)
    POST /v1/translations                                   a translation run
    POST /v1/classifications                                a text or an image classifier
    POST /v1/detections                                     a DETR

Each handler only parses (:mod:`aiayn.serve.schema`), hands the work to the model's one worker thread
(:mod:`aiayn.serve.generation` or :mod:`aiayn.serve.batching`) and answers; a bad field is a 400 naming it, a full
queue a 503 with ``Retry-After``, a client that goes away cancels its rows. While the server drains (SIGTERM) new
requests get a 503 and the ones in flight finish.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import torch
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from aiayn.data.chat import chat_template, render_chat, special_tokens
from aiayn.decoding.config import GenerationConfig
from aiayn.decoding.settings import SettingError, check_beams
from aiayn.defaults import MAX_WAIT_MS, SERVING
from aiayn.pipelines.base import METHODS, Pipeline
from aiayn.pipelines.lm import Text, prompt_ids
from aiayn.serve import images, schema
from aiayn.serve.batching import Job, MicroBatcher, Worker
from aiayn.serve.errors import ApiError, bad, busy
from aiayn.serve.generation import ContinuousBatcher, Event, Row, prompt_logprobs
from aiayn.serve.metrics import Metrics

CHAT = "/v1/chat/completions"
ENDPOINTS = {"generate": "/v1/completions", "embed": "/v1/embeddings", "translate": "/v1/translations",
             "classify": "/v1/classifications", "detect": "/v1/detections"}


@dataclass(frozen=True)
class Settings:
    """How the server batches and what it refuses (defaults: :data:`aiayn.defaults.SERVING`).

    Args:
        name: the model's name in ``/v1/models`` and the ``model`` field requests may give.
        max_batch: rows (generation) or inputs (the others) run together, at most.
        max_wait_ms: how long a first request waits for others to batch with (an idle worker only).
        max_queue: rows or inputs that may wait; past it, 503 with ``Retry-After``.
        max_inputs: prompts, texts or images in one request, at most (413 past it).
        max_body: bytes of one request body, at most (413 past it).
        max_len: a completion's prompt and new tokens, at most (``None``: the model's ``max_len``); with
            ``compile``, the columns of each slot, which every step reads whole.
    """

    name: str = "model"
    max_batch: int = SERVING["max_batch"]
    max_wait_ms: float = SERVING["max_wait_ms"]
    max_queue: int = SERVING["max_queue"]
    max_inputs: int = SERVING["max_inputs"]
    max_body: int = SERVING["max_body"]
    max_len: int | None = None

    def __post_init__(self) -> None:
        for field in ("max_batch", "max_queue", "max_inputs", "max_body"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)}")
        for field in ("max_batch", "max_queue", "max_inputs", "max_body", "max_len"):
            if isinstance(getattr(self, field), bool):
                raise ValueError(f"{field} must be an integer, got {getattr(self, field)!r}")
        if not (isinstance(self.max_wait_ms, (int, float)) and math.isfinite(self.max_wait_ms)
                and 0 <= self.max_wait_ms <= MAX_WAIT_MS):
            raise ValueError(f"max_wait_ms must be a number of milliseconds in [0, {MAX_WAIT_MS}], got "
                             f"{self.max_wait_ms!r}")
        if self.max_len is not None and self.max_len < 2:
            raise ValueError(f"max_len must be >= 2 (a prompt token and a new one), got {self.max_len}")
        if not self.name:
            raise ValueError("name must not be empty")


class _Gone(Exception):
    """The client disconnected before its answer was ready."""


class _Stream(StreamingResponse):
    """A stream that is closed however it ends (a client gone mid-send included), so its rows are freed at once
    rather than when the garbage collector finds the abandoned generator."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


def make_app(pipe: Pipeline, settings: Settings | None = None) -> Starlette:
    """The ASGI application serving ``pipe`` (its task decides the endpoints); ``app.state.draining = True``
    makes it refuse new requests while those in flight finish."""
    s = settings or Settings()
    server = _Server(pipe, s)
    routes = [Route("/health", server.health), Route("/metrics", server.metrics_text),
              Route("/v1/models", server.models)]
    path = ENDPOINTS[server.method]
    routes.append(Route(path, server.endpoint(path, server.handler()),
                        methods=["POST"]))
    if server.method == "generate":
        routes.append(Route(CHAT, server.endpoint(CHAT, server.chat_completions), methods=["POST"]))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        server.worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(server.worker.stop)

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: server.http_error})
    app.state.draining = False
    app.state.server = server
    return app


class _Server:
    """The handlers and what they share: the pipeline, its worker, the metrics."""

    def __init__(self, pipe: Pipeline, settings: Settings) -> None:
        self.pipe, self.settings, self.metrics = pipe, settings, Metrics()
        self.method = METHODS[pipe.task]  # what the pipeline does: generate, embed, translate, classify, detect
        self.created = int(time.time())
        model_len = getattr(cast(Any, pipe.model).cfg, "max_len", None)
        if settings.max_len is not None and model_len is not None and settings.max_len > model_len:
            raise ValueError(f"max_len={settings.max_len} is more than the model's {model_len} positions")
        self.max_len = settings.max_len or model_len
        self.chat_template = chat_template(pipe.source) if self.method == "generate" else None
        self.worker = self._worker()

    # ---- the worker of the task --------------------------------------------------------------------------------

    def _worker(self) -> Worker:
        s, task, pipe = self.settings, self.method, self.pipe
        wait = s.max_wait_ms / 1000
        if task == "generate":
            tok = pipe.parts["tok"]
            ends = set() if tok.eos_id is None else {tok.eos_id}
            return ContinuousBatcher(pipe.model, ends, s.max_batch, wait, s.max_queue, self.metrics,
                                     compile=pipe.compile, length=self.max_len)
        if pipe.compile:  # micro-batches of every size and length: a compile for each shape
            raise ValueError(f"compile serves a language model (one compiled step for every batch); a {task} "
                             f"pipeline's batches change shape with each request: serve it without compile")
        call: Callable[[Any, list[Any]], list[Any]]
        if task == "embed":
            call = lambda key, texts: list(pipe.embed(texts))  # noqa: E731  (N, C) -> N vectors
        elif task == "translate":
            call = lambda beam, texts: list(pipe.translate(texts, beam=int(beam)))  # noqa: E731
        elif task == "classify":
            call = lambda top, inputs: list(pipe.classify(inputs, top=int(top)))  # noqa: E731
        else:
            detector = pipe.parts["detector"]
            call = lambda threshold, pictures: [  # noqa: E731  (one at a time: DETR reads no padding mask)
                images.find_objects(detector, p, float(threshold)) for p in pictures]
        return MicroBatcher(call, s.max_batch, wait, s.max_queue, self.metrics)

    def handler(self) -> Callable[[Request, dict[str, Any]], Awaitable[Response]]:
        return {"generate": self.completions, "embed": self.embeddings, "translate": self.translations,
                "classify": self.classifications, "detect": self.detections}[self.method]

    # ---- around every POST: body, errors, metrics -----------------------------------------------------------

    def endpoint(self, path: str, handle: Callable[[Request, dict[str, Any]], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
        """``handle(request, body)`` with the body read as JSON, errors answered as JSON, and metrics kept."""

        async def run(request: Request) -> Response:
            start = time.perf_counter()
            try:
                if request.app.state.draining:
                    raise ApiError(503, "the server is shutting down; retry on another", None,
                                   {"Retry-After": "1", "Connection": "close"})
                response = await handle(request, await self._json(request))
            except ApiError as e:
                response = JSONResponse(e.body(), e.status, headers=e.headers)
            except _Gone:
                self.metrics.request(path, 499, time.perf_counter() - start)  # nginx's "client closed request"
                return Response(status_code=499)
            except Exception as e:  # a failure of ours: a 500 that says what, and the server goes on
                response = JSONResponse(ApiError(500, f"{type(e).__name__}: {e}").body(), 500)
            if isinstance(response, StreamingResponse):  # the stream counts itself when it ends
                return response
            self.metrics.request(path, response.status_code, time.perf_counter() - start)
            return response

        return run

    async def _json(self, request: Request) -> Any:
        """The request's JSON body, refused past ``max_body`` bytes (413) or when it is not JSON (400)."""
        limit = self.settings.max_body
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"the request body is {declared} bytes; at most {limit}", "body")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the request body is over {limit} bytes", "body")
            chunks.append(chunk)
        try:
            return json.loads(b"".join(chunks))
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not JSON: {e}", "body") from None

    async def http_error(self, request: Request, exc: Exception) -> Response:
        """Unknown paths (404) and methods (405) answered in the same JSON shape as the rest."""
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = {404: f"no endpoint {request.url.path}; this server's model can {self.method}: POST "
                        f"{ENDPOINTS[self.method]}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(status, str(exc))
        self.metrics.request("other", status, 0.0)
        return JSONResponse(ApiError(status, message).body(), status)

    # ---- GET ---------------------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        draining = request.app.state.draining
        body = {"status": "draining" if draining else "ok", "task": self.pipe.task,
                "queue": len(self.worker.waiting)}
        return JSONResponse(body, 503 if draining else 200)

    async def metrics_text(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics.text(), media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.settings.name, "object": "model",
                                                          "created": self.created, "owned_by": "aiayn",
                                                          "task": self.pipe.task}]})

    # ---- POST /v1/completions and /v1/chat/completions ----------------------------------------------------------

    async def completions(self, request: Request, body: dict[str, Any]) -> Response:
        return await self._complete(request, schema.completion(body, self.settings.max_inputs), body, chat=False)

    async def chat_completions(self, request: Request, body: dict[str, Any]) -> Response:
        req = schema.chat(body, self.settings.max_inputs)
        specials = special_tokens(self.pipe.parts["tok"])
        try:
            prompt = render_chat(self.chat_template or "", req.messages or [], add_generation_prompt=True, **specials)
        except ValueError as e:
            raise bad("messages", str(e)) from None
        return await self._complete(request, dataclasses.replace(req, prompts=[prompt]), body, chat=True)

    async def _complete(self, request: Request, req: schema.Completion, body: dict[str, Any], chat: bool) -> Response:
        name = schema.model_name(body, self.settings.name)
        tok, most = self.pipe.parts["tok"], self.max_len
        assert most is not None  # a language model has its positions' number
        encoded = []
        for i, prompt in enumerate(req.prompts):
            field = "messages" if chat else "prompt" if len(req.prompts) == 1 else f"prompt[{i}]"
            try:  # the pipeline's check, in the server's names
                encoded.append(prompt_ids(tok, prompt, most, req.max_tokens, field=field, reader="the server"))
            except SettingError as e:
                raise bad("max_tokens" if e.name == "max_new_tokens" else e.name, e.reason) from None
        loop, events = asyncio.get_running_loop(), asyncio.Queue[tuple[int, Event]]()
        device = next(self.pipe.model.parameters()).device
        config = GenerationConfig(max_new_tokens=req.max_tokens, do_sample=req.temperature > 0,
                                  temperature=req.temperature if req.temperature > 0 else 1.0, top_k=req.top_k,
                                  top_p=req.top_p)  # the request's settings, once (checked by the schema)
        rows = [Row(prompt=ids, config=config,
                    generator=None if req.seed is None else torch.Generator(device).manual_seed(req.seed + j),
                    text=Text(tok, req.stop), send=partial(_post, loop, events, i * req.n + j),
                    logprobs=req.logprobs, presence_penalty=req.presence_penalty,
                    frequency_penalty=req.frequency_penalty)
                for i, ids in enumerate(encoded) for j in range(req.n)]  # choice i * n + j: prompt i's j-th
        echoed = {}
        if req.echo:  # the prompt before each of its continuations (and its tokens' log-probabilities)
            for i, ids in enumerate(encoded):
                lp = (await asyncio.to_thread(prompt_logprobs, self.pipe.model, ids, req.logprobs)
                      if req.logprobs is not None else [])
                echoed[i] = (req.prompts[i], lp)
        if not self.worker.submit(rows):  # type: ignore[attr-defined]
            raise busy()
        answer = _Answer(tok, chat, req, name, {i * req.n + j: e for i, e in echoed.items() for j in range(req.n)},
                         sum(len(ids) for ids in encoded))
        if req.stream:
            return _Stream(self._stream(request, events, rows, answer, req.include_usage, CHAT if chat else
                                        "/v1/completions"),
                           media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        texts, marks = [""] * len(rows), [[] for _ in rows]  # type: list[str], list[list[Any]]
        reasons = [""] * len(rows)
        for i, (text, lp) in answer.echoed.items():
            texts[i], marks[i] = text, list(lp)
        async with contextlib.aclosing(_events(request, events, rows)) as each:
            async for i, (kind, value) in each:
                if kind == "piece":
                    texts[i] += value[0]
                    marks[i] += value[1]
                elif kind == "done":
                    reasons[i] = value
                else:
                    raise value
        choices = [answer.choice(i, t, marks[i], r) for i, (t, r) in enumerate(zip(texts, reasons))]
        return JSONResponse({**answer.head(), "choices": choices, "usage": answer.usage(rows)})

    async def _stream(self, request: Request, events: asyncio.Queue, rows: list[Row], answer: _Answer,
                      include_usage: bool, path: str) -> AsyncIterator[str]:
        """Server-sent events as OpenAI sends them: a chunk per piece of text (a chat's first says the role), one
        with each row's ``finish_reason``, the usage when asked for, then ``[DONE]``."""
        start, status = time.perf_counter(), 499  # until the end is sent: the client went away
        head = answer.head(chunk=True)
        try:
            for i in range(len(rows)):  # a chat's role first, a completion's echoed prompt
                if answer.chat:
                    yield _sse({**head, "choices": [answer.delta(i, {"role": "assistant", "content": ""})]})
                elif i in answer.echoed:
                    yield _sse({**head, "choices": [answer.piece(i, *answer.echoed[i])]})
            async with contextlib.aclosing(_events(request, events, rows)) as each:
                async for i, (kind, value) in each:
                    if kind == "error":
                        status = 500
                        yield _sse(ApiError(500, f"{type(value).__name__}: {value}").body())
                        return
                    choice = answer.piece(i, *value) if kind == "piece" else answer.end(i, value)
                    yield _sse({**head, "choices": [choice]})
            if include_usage:
                yield _sse({**head, "choices": [], "usage": answer.usage(rows)})
            yield "data: [DONE]\n\n"
            status = 200
        except _Gone:
            pass
        finally:
            self.metrics.request(path, status, time.perf_counter() - start)

    # ---- POST: micro-batched tasks ------------------------------------------------------------------------------

    async def _batched(self, request: Request, inputs: list[Any], key: Hashable) -> list[Any]:
        """Run ``inputs`` in the micro-batcher with others of the same ``key``; their results, in order."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        job = Job(inputs, key, lambda result: _call_soon(loop, _settle, answer, result))
        if not self.worker.submit(job):  # type: ignore[attr-defined]
            raise busy()
        gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not answer.done():
            job.cancelled = True
            raise _Gone
        result = answer.result()
        if isinstance(result, (ValueError, TypeError)):  # the pipeline refused an input: the client's fault
            raise ApiError(400, str(result), "input")
        if isinstance(result, BaseException):
            raise result
        return result

    async def embeddings(self, request: Request, body: dict[str, Any]) -> Response:
        body = schema.fields(body, {"model", "input", "encoding_format", "dimensions"})
        name = schema.model_name(body, self.settings.name)
        texts = schema.texts(body, "input", self.settings.max_inputs)
        form = body.get("encoding_format") or "float"
        if form not in ("float", "base64"):
            raise bad("encoding_format", f"must be 'float' or 'base64', got {form!r}")
        width = cast(Any, self.pipe.model).cfg.d_model
        if schema.integer(body, "dimensions", width, 1) != width:
            raise bad("dimensions", f"must be the model's {width} (vectors are not shortened), got "
                                    f"{body['dimensions']!r}")
        vectors = await self._batched(request, texts, "embed")
        tok = self.pipe.parts["tok"]
        tokens = sum(len(tok.encode(t)[0]) for t in texts)  # WordPiece: (ids, token types); no specials counted
        self.metrics.count_tokens(prompt=tokens)

        def encoded(v: torch.Tensor) -> Any:
            if form == "float":
                return v.tolist()
            return base64.b64encode(v.to(torch.float32).numpy().astype("<f4").tobytes()).decode()

        data = [{"object": "embedding", "index": i, "embedding": encoded(v)} for i, v in enumerate(vectors)]
        return JSONResponse({"object": "list", "data": data, "model": name,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def translations(self, request: Request, body: dict[str, Any]) -> Response:
        body = schema.fields(body, {"model", "input", "beam"})
        name = schema.model_name(body, self.settings.name)
        texts = schema.texts(body, "input", self.settings.max_inputs)
        schema.settings(num_beams=body.get("beam"))  # every door's words and ceiling
        beam = int(body.get("beam") or 1)
        try:
            check_beams(beam, cast(Any, self.pipe.model).cfg.tgt_vocab_size)
        except SettingError as e:
            raise bad("beam", e.reason) from None
        found = await self._batched(request, texts, beam)
        data = [{"object": "translation", "index": i, "text": t} for i, t in enumerate(found)]
        return JSONResponse({"object": "list", "data": data, "model": name})

    async def classifications(self, request: Request, body: dict[str, Any]) -> Response:
        body = schema.fields(body, {"model", "input", "images", "top"})
        name = schema.model_name(body, self.settings.name)
        classes = self.pipe.parts.get("classes")
        top = schema.integer(body, "top", 3, 1)
        inputs: list[Any]
        if classes is not None:  # a text classifier
            if "images" in body:
                raise bad("images", "this model classifies texts: send them as input")
            inputs, top = schema.texts(body, "input", self.settings.max_inputs), min(top or 3, len(classes))
        else:
            if "input" in body:
                raise bad("input", "this model classifies images: send them, base64-encoded, as images")
            files = schema.image_bytes(body, "images", self.settings.max_inputs)
            pictures = [images.decode(f, f"images[{i}]") for i, f in enumerate(files)]
            inputs = [images.pixels(p).float() / 255 for p in pictures]  # (3, H, W) in [0, 1]
        found = await self._batched(request, inputs, top)
        data = [{"index": i, **{k: v for k, v in r.items() if k != "text"}} for i, r in enumerate(found)]
        return JSONResponse({"object": "list", "data": data, "model": name})

    async def detections(self, request: Request, body: dict[str, Any]) -> Response:
        body = schema.fields(body, {"model", "images", "threshold"})
        name = schema.model_name(body, self.settings.name)
        threshold = schema.number(body, "threshold", 0.7, 0.0, 1.0)
        if threshold >= 1:
            raise bad("threshold", f"must be below 1, got {threshold}")
        files = schema.image_bytes(body, "images", self.settings.max_inputs)
        pictures = [images.decode(f, f"images[{i}]") for i, f in enumerate(files)]
        found = await self._batched(request, pictures, threshold)
        data = [{"index": i, "objects": objects} for i, objects in enumerate(found)]
        return JSONResponse({"object": "list", "data": data, "model": name})


# ---- the OpenAI shapes of an answer ------------------------------------------------------------------------------


class _Answer:
    """How one completion or chat request's answer is laid out, as OpenAI's API reference gives it: the head of
    every body or chunk, a choice (``text`` or ``message``), a chunk's piece (``text`` or ``delta``), and the
    log-probabilities (a completion's ``tokens``/``token_logprobs``/``top_logprobs``/``text_offset``; a chat's
    ``content`` entries with ``token``, ``logprob``, ``bytes`` and ``top_logprobs``)."""

    def __init__(self, tok: Any, chat: bool, req: schema.Completion, name: str,
                 echoed: dict[int, tuple[str, list[Any]]], prompt_tokens: int) -> None:
        self.tok, self.chat, self.req, self.name, self.echoed = tok, chat, req, name, echoed
        self.prompt_tokens = prompt_tokens
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.offsets = [0] * (len(req.prompts) * req.n)  # each choice's text so far, for text_offset

    def head(self, chunk: bool = False) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.name}

    def choice(self, i: int, text: str, marks: list[Any], reason: str) -> dict[str, Any]:
        """Choice ``i`` of a whole answer."""
        self.offsets[i] = 0
        if self.chat:
            return {"index": i, "message": {"role": "assistant", "content": text}, "logprobs": self._logprobs(i, marks),
                    "finish_reason": reason}
        return {"text": text, "index": i, "logprobs": self._logprobs(i, marks), "finish_reason": reason}

    def piece(self, i: int, text: str, marks: list[Any]) -> dict[str, Any]:
        """A streamed chunk's choice: ``text`` (and its tokens' log-probabilities)."""
        if self.chat:
            return self.delta(i, {"content": text}, marks)
        return {"text": text, "index": i, "logprobs": self._logprobs(i, marks), "finish_reason": None}

    def delta(self, i: int, delta: dict[str, Any], marks: list[Any] | None = None) -> dict[str, Any]:
        return {"index": i, "delta": delta, "logprobs": self._logprobs(i, marks or []) if marks else None,
                "finish_reason": None}

    def end(self, i: int, reason: str) -> dict[str, Any]:
        if self.chat:
            return {"index": i, "delta": {}, "logprobs": None, "finish_reason": reason}
        return {"text": "", "index": i, "logprobs": None, "finish_reason": reason}

    def usage(self, rows: list[Row]) -> dict[str, int]:
        made = sum(r.steps for r in rows)  # (the prompt counted once, whatever n)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": made,
                "total_tokens": self.prompt_tokens + made}

    def _logprobs(self, i: int, marks: list[Any]) -> Any:
        if self.req.logprobs is None:
            return None
        name = lambda t: self.tok.decode([t])  # noqa: E731  (a token's own text)
        if self.chat:
            return {"content": [{"token": name(t), "logprob": lp, "bytes": list(name(t).encode()),
                                 "top_logprobs": [{"token": name(a), "logprob": alp, "bytes": list(name(a).encode())}
                                                  for a, alp in top]} for t, lp, top in marks],
                    "refusal": None}
        tokens, offsets = [], []
        for token, _, _ in marks:
            offsets.append(self.offsets[i])
            tokens.append(name(token))
            self.offsets[i] += len(tokens[-1])
        return {"tokens": tokens, "token_logprobs": [lp for _, lp, _ in marks],
                "top_logprobs": [None if lp is None else {name(a): alp for a, alp in top} for _, lp, top in marks],
                "text_offset": offsets}


# ---- the event loop's side of the worker's hand-offs -------------------------------------------------------------


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn(*args)`` on ``loop`` from the worker thread; nothing once the loop is closed (server gone)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def _post(loop: asyncio.AbstractEventLoop, events: asyncio.Queue, index: int, event: Event) -> None:
    _call_soon(loop, events.put_nowait, (index, event))


def _settle(answer: asyncio.Future, result: Any) -> None:
    if not answer.done():
        answer.set_result(result)


async def _disconnected(request: Request) -> None:
    """Return when the client has gone (the body was read, so the next message can only be the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _events(request: Request, events: asyncio.Queue, rows: list[Row]
                  ) -> AsyncGenerator[tuple[int, Event], None]:
    """The rows' events as they come, until each row is done or failed; if the client goes away first, its rows
    are cancelled (they leave the batch at the next step) and :class:`_Gone` is raised."""
    left = len(rows)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        while left:
            get = asyncio.ensure_future(events.get())
            await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                raise _Gone
            index, event = get.result()
            if event[0] in ("done", "error"):
                left -= 1
            yield index, event
    finally:
        gone.cancel()
        for r in rows:
            if not r.done:
                r.cancelled = True


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


__all__ = ["ENDPOINTS", "Settings", "make_app"]
