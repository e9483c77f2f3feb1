"""What each endpoint reads from a request's JSON, checked field by field: a wrong field is a 400 that names it
(:func:`aiayn.serve.errors.bad`), a field the server does not know is refused by name, as OpenAI's API does.

The completion fields are OpenAI's (``/v1/completions``) with its defaults: 16 new tokens at temperature 1;
``temperature: 0`` is greedy decoding. ``top_k`` is an extension (0 or absent: every token). ``n`` continuations
of each prompt (with ``seed``, continuation ``j`` draws from a generator seeded ``seed + j``), ``logprobs`` (0 to
5 alternatives), ``echo``, ``presence_penalty`` and ``frequency_penalty`` ([-2, 2]). ``/v1/chat/completions``
takes ``messages`` instead of ``prompt``, ``logprobs`` as a flag with ``top_logprobs`` (0 to 20) and
``max_completion_tokens`` beside ``max_tokens``. ``logit_bias``, ``best_of``, ``suffix``, ``tools`` and a
``response_format`` other than text are refused by name. The other endpoints take ``input`` (a string or a list
of them) as ``/v1/embeddings`` does, and their own knobs.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

from aiayn.decoding.settings import SettingError, check
from aiayn.serve.errors import ApiError, bad

# the request fields that set a generation setting under another name (aiayn.decoding.settings)
FIELDS = {"max_new_tokens": "max_tokens", "num_beams": "beam"}

# OpenAI fields we accept only at the value that changes nothing (anything else is refused by name)
NEUTRAL: dict[str, Any] = {"best_of": 1, "suffix": None, "logit_bias": None, "response_format": {"type": "text"},
                           "tools": None, "tool_choice": None, "parallel_tool_calls": None, "functions": None,
                           "function_call": None}
MOST_N = 16  # continuations of one prompt (n), at most
MOST_LOGPROBS = {"logprobs": 5, "top_logprobs": 20}  # alternatives per token, at most (OpenAI's limits)


def fields(body: Any, known: set[str]) -> dict[str, Any]:
    """``body`` as a dict whose keys are all ``known`` (or neutral, or ``user``); refuses anything else by name."""
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    for key, value in body.items():
        if key in known or key == "user":
            continue
        if key in NEUTRAL:
            if value not in (NEUTRAL[key], None):
                raise bad(key, f"is not supported here: only {NEUTRAL[key]!r} (or absent), got {value!r}")
            continue
        raise ApiError(400, f"unrecognized request field {key!r}; this endpoint takes {sorted(known)}", key)
    return body


def model_name(body: dict[str, Any], served: str) -> str:
    """The ``model`` field: absent, or the name the server serves (``GET /v1/models``)."""
    name = body.get("model")
    if name is None:
        return served
    if not isinstance(name, str):
        raise bad("model", f"must be a string, got {type(name).__name__}")
    if name != served:
        raise ApiError(404, f"model {name!r} is not served here; this server serves {served!r} (GET /v1/models)",
                       "model")
    return name


def texts(body: dict[str, Any], key: str, most: int) -> list[str]:
    """A string or a non-empty list of at most ``most`` strings, as a list."""
    value = body.get(key)
    if isinstance(value, str):
        return [unicode(value, key)]
    if not isinstance(value, list) or not value:
        raise bad(key, f"must be a string or a non-empty list of strings, got {_kind(value)}")
    if len(value) > most:
        raise ApiError(413, f"{key} holds {len(value)} items; at most {most} per request", key)
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise bad(f"{key}[{i}]", f"must be a string, got {_kind(v)} (token ids are not taken)")
        unicode(v, f"{key}[{i}]")
    return list(value)


def unicode(text: str, key: str) -> str:
    """``text``, refused when it is not valid Unicode (JSON's ``\\ud800`` escapes decode to a lone surrogate,
    which no tokenizer can encode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise bad(key, f"is not valid Unicode: a lone surrogate {text[e.start]!r} at character {e.start}") from None
    return text


def settings(**given: Any) -> None:
    """:func:`aiayn.decoding.settings.check` of the generation settings ``given``: a 400 naming the request's
    field, with the words every door uses."""
    try:
        check(**given)
    except SettingError as e:
        raise bad(FIELDS.get(e.name, e.name), e.reason) from None


def integer(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    """An integer in ``[lo, hi]``, or ``default`` when absent or null."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        upper = "" if hi is None else f" and <= {hi}"
        raise bad(key, f"must be an integer >= {lo}{upper}, got {value!r}")
    return value


def number(body: dict[str, Any], key: str, default: float, lo: float, hi: float, open_lo: bool = False) -> float:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``open_lo``), or ``default`` when absent or null."""
    value = body.get(key)
    if value is None:
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > hi or value < lo or (open_lo and value == lo):
        raise bad(key, f"must be a number in {'(' if open_lo else '['}{lo}, {hi}], got {value!r}")
    return float(value)


def flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(key, f"must be true or false, got {value!r}")
    return value


@dataclass(frozen=True)
class Completion:
    """A ``POST /v1/completions`` or ``/v1/chat/completions`` request, checked. ``temperature`` 0 is greedy;
    ``top_p`` 1 and ``top_k`` 0 keep every token. ``prompts`` is empty for a chat, whose ``messages`` the server
    renders with the model's chat template; ``logprobs``: alternatives reported per token (``None``: no
    log-probabilities)."""

    prompts: list[str]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop: list[str]
    seed: int | None
    stream: bool
    include_usage: bool
    n: int = 1
    logprobs: int | None = None
    echo: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    messages: list[dict[str, str]] | None = None


SAMPLING = {"model", "max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "stream", "stream_options", "n",
            "logprobs", "presence_penalty", "frequency_penalty"}
COMPLETION = SAMPLING | {"prompt", "echo"}
CHAT = SAMPLING | {"messages", "top_logprobs", "max_completion_tokens"}
ROLES = ("system", "developer", "user", "assistant", "tool")


def completion(body: Any, most: int) -> Completion:
    """Read a completion request (OpenAI's fields and defaults); ``most``: prompts (times ``n``) per request."""
    body = fields(body, COMPLETION)
    if "prompt" not in body:
        raise bad("prompt", "is required")
    prompts = texts(body, "prompt", most)
    logprobs = integer(body, "logprobs", None, 0, MOST_LOGPROBS["logprobs"])
    return _sampling(body, prompts, most, logprobs, echo=flag(body, "echo"))


def chat(body: Any, most: int) -> Completion:
    """Read a chat completion request (OpenAI's fields and defaults); ``most``: choices (``n``) per request."""
    body = fields(body, CHAT)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", f"must be a non-empty list of messages, got {_kind(messages)}")
    read = [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    if body.get("max_completion_tokens") is not None:
        if body.get("max_tokens") is not None:
            raise bad("max_completion_tokens", "give it or max_tokens, not both")
        body = {**body, "max_tokens": body["max_completion_tokens"]}
    wanted = flag(body, "logprobs")
    top = integer(body, "top_logprobs", None, 0, MOST_LOGPROBS["top_logprobs"])
    if top is not None and not wanted:
        raise bad("top_logprobs", "needs logprobs: true")
    return _sampling(body, [], most, (top or 0) if wanted else None, messages=read)


def _message(m: Any, key: str) -> dict[str, str]:
    """One chat message as ``{"role", "content"}``: content a string, or a list of text parts joined."""
    if not isinstance(m, dict):
        raise bad(key, f"must be an object with role and content, got {_kind(m)}")
    role, content = m.get("role"), m.get("content")
    if role not in ROLES:
        raise bad(f"{key}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise bad(f"{key}.content[{j}]", f"must be a text part {{'type': 'text', 'text': ...}} (this model "
                                                 f"reads text only), got {_kind(part)}")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise bad(f"{key}.content", f"must be a string or a list of text parts, got {_kind(content)}")
    return {"role": role, "content": unicode(content, f"{key}.content")}


def _sampling(body: dict[str, Any], prompts: list[str], most: int, logprobs: int | None, echo: bool = False,
              messages: list[dict[str, str]] | None = None) -> Completion:
    """The fields completions and chats share, checked."""
    n = integer(body, "n", 1, 1, MOST_N)
    assert n is not None
    if n * max(len(prompts), 1) > most:
        raise ApiError(413, f"n={n} continuations of {max(len(prompts), 1)} prompt(s) is {n * max(len(prompts), 1)} "
                            f"rows; at most {most} per request", "n")
    penalties = {k: number(body, k, 0.0, -2.0, 2.0) for k in ("presence_penalty", "frequency_penalty")}
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    elif not (isinstance(stop, list) and len(stop) <= 16 and all(isinstance(s, str) for s in stop)):
        raise bad("stop", f"must be a string or a list of at most 16 strings, got {_kind(stop)}")
    for i, s in enumerate(stop):
        unicode(s, "stop" if len(stop) == 1 else f"stop[{i}]")
    options = body.get("stream_options")
    if options is not None and not (isinstance(options, dict) and set(options) <= {"include_usage"}):
        raise bad("stream_options", f"must be an object with include_usage only, got {options!r}")
    given = {name: body.get(field) for name, field in (("max_new_tokens", "max_tokens"), ("temperature", "temperature"),
                                                       ("top_p", "top_p"), ("top_k", "top_k"), ("seed", "seed"))}
    settings(**given)  # every door's check, in its words: types, finite, ranges, ceilings
    seed = given["seed"]
    return Completion(
        prompts=prompts,
        max_tokens=16 if given["max_new_tokens"] is None else int(given["max_new_tokens"]),
        temperature=1.0 if given["temperature"] is None else float(given["temperature"]),
        top_p=1.0 if given["top_p"] is None else float(given["top_p"]),
        top_k=0 if given["top_k"] is None else int(given["top_k"]),
        stop=[s for s in stop if s],
        seed=None if seed is None else int(seed),
        stream=flag(body, "stream"),
        include_usage=flag(options or {}, "include_usage"),
        n=n, logprobs=logprobs, echo=echo, messages=messages, **penalties,
    )


def image_bytes(body: dict[str, Any], key: str, most: int) -> list[bytes]:
    """A non-empty list of base64 images (or ``data:image/...;base64,`` URLs), decoded to their file bytes."""
    value = body.get(key)
    if not isinstance(value, list) or not value:
        raise bad(key, f"must be a non-empty list of base64-encoded image files, got {_kind(value)}")
    if len(value) > most:
        raise ApiError(413, f"{key} holds {len(value)} images; at most {most} per request", key)
    out = []
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise bad(f"{key}[{i}]", f"must be a base64 string, got {_kind(v)}")
        data = v.split(",", 1)[1] if v.startswith("data:") and "," in v else v
        try:
            out.append(base64.b64decode(data, validate=True))
        except (binascii.Error, ValueError):
            raise bad(f"{key}[{i}]", "is not valid base64") from None
    return out


def _kind(value: Any) -> str:
    """How a value is named in an error: its JSON type, and the value when short."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    name = names.get(type(value), "a number")
    return name if isinstance(value, (dict, list)) or value is None else f"{name} ({str(value)[:40]!r})"


__all__ = ["CHAT", "COMPLETION", "Completion", "chat", "completion", "fields", "flag", "image_bytes", "integer",
           "model_name", "number", "texts"]
