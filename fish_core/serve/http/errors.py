"""The errors every route answers with: ``ApiError`` (a status and OpenAI's error shape ``{"error":
{"message", "type", "param", "code"}}``), ``bad`` (a field's error, its message starting with the
field's name) and ``detail``, through which any text quoted from elsewhere (a decoder's or
loader's message) passes, so that no server path or object repr reaches a client;
``ClientGone`` when nobody is left to answer.
"""

from __future__ import annotations

import re

REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")
PATH = re.compile(r"(?<![\w.:/])(?:~|[A-Za-z]:)?[/\\](?:[^\s/\\'\"<>:]+[/\\])+[^\s/\\'\"<>:,;)]*")


class ClientGone(Exception):
    """The client left (mid-body, or while its answer was being made): nobody to answer."""


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param,
                          "code": self.code}}


def shutting_down() -> ApiError:
    """What a request is told when the server stops (SIGTERM, SIGINT) before it could be
    answered: a 503 a load balancer retries elsewhere."""
    return ApiError(503, "the server is shutting down", None, "shutting_down",
                    {"Retry-After": "1"})


def bad(param: str, message: str, status: int = 400, code: str | None = None) -> ApiError:
    return ApiError(status, f"{param}: {message}", param, code)


def detail(error: Exception | str) -> str:
    """An exception's text for a client: object reprs and absolute paths left out."""
    text = REPR.sub("<data>", str(error))
    return PATH.sub("<path>", text)
