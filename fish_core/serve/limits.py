"""``Limits``: the bounds one service holds every request to (bodies, text, references, time,
WebSocket sessions, the drain at shutdown); the CLI's ``serve`` options set them."""

from __future__ import annotations

from dataclasses import dataclass

from ..budgets import MAX_ANSWER_SECONDS


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 20 * 2**20
    max_text_chars: int = 4096
    max_references: int = 4
    max_reference_seconds: float = 60.0
    max_new_tokens: int = 4096
    timeout_seconds: float = 600.0
    body_timeout_seconds: float = 60.0  # to receive a whole request body
    max_json_depth: int = 32  # nesting of a JSON body (ours need 3)
    max_form_parts: int = 16  # parts of a multipart body
    stream_idle_seconds: float = 30.0  # WS /v1/audio/speech/stream: no sentence before it closes
    max_streams_per_client: int = 8  # WS sessions open at once from one peer address
    max_answer_seconds: float = MAX_ANSWER_SECONDS  # audio of one answer (``budgets``)
    max_streams: int = 64  # WS sessions open at once in all (503 before the upgrade beyond)
    shutdown_seconds: float = 5.0  # SIGTERM: what is in progress may finish within this

    def request_bytes(self) -> int:
        """The most bytes of a request (or WebSocket message) that carries no reference audio:
        its text at JSON's worst (12 bytes per character, a \\uXXXX surrogate pair) plus the
        other fields. Only a request with references may be larger (up to ``max_body_bytes``)."""
        return 12 * self.max_text_chars + 16 * 1024

    def json_items(self) -> int:
        """The most JSON structure bytes (``, : [ { " \\``) a request may hold: every text field
        full of them, with room to spare (base64 audio has none). Counted before parsing, so a
        body of a million tiny values is refused before it becomes a million Python objects."""
        return 8 * (2 + self.max_references) * self.max_text_chars + 4096
