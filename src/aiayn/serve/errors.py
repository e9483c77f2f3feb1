"""Errors that go back to the client as JSON, in OpenAI's shape, so its clients read them:

    {"error": {"message": "max_tokens must be an integer >= 1, got -3", "type": "invalid_request_error",
               "param": "max_tokens", "code": null}}

A request that is wrong is answered 4xx with the field it got wrong in ``param``; a full queue 503 with a
``Retry-After`` header; a failure of the model 500. None of them stops the server.
"""

from __future__ import annotations

from typing import Any

TYPES = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error",
         413: "invalid_request_error", 415: "invalid_request_error", 503: "overloaded_error", 500: "server_error"}


class ApiError(Exception):
    """A request the server refuses or could not answer.

    Args:
        status: the HTTP status (400 bad field, 404 unknown model or path, 413 too large, 503 busy, 500 failure).
        message: what was wrong and what was wanted, in a sentence.
        param: the request field at fault (``"max_tokens"``, ``"input[2]"``), or ``None``.
        headers: extra response headers (``Retry-After`` for 503).
    """

    def __init__(self, status: int, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": None}}


def bad(param: str, message: str) -> ApiError:
    """A 400 naming ``param``: ``bad("top_p", "must be in (0, 1], got 3")``."""
    return ApiError(400, f"{param} {message}", param)


def busy(retry_after: int = 1) -> ApiError:
    """A 503 for a full queue (or a server shutting down), with ``Retry-After`` in seconds."""
    return ApiError(503, "the server is busy: its queue is full; retry after the time in Retry-After", None,
                    {"Retry-After": str(retry_after)})


__all__ = ["ApiError", "bad", "busy"]
