"""Request bodies, read within bounds: a size limit, a time limit to receive them, the content
type each route takes (so a web page cannot send a "simple" cross-site request that is parsed
as JSON), the nesting depth of JSON and the number of multipart parts. Every failure is an
``ApiError`` naming ``body`` or ``content-type``."""

from __future__ import annotations

import asyncio
import json

from aiohttp import BodyPartReader, web

from .requests import ApiError, Limits, bad

JSON_TYPES = ("application/json",)
MSGPACK_TYPE = "application/msgpack"
OPENERS, CLOSERS = frozenset(b"[{"), frozenset(b"]}")


async def read_body(request: web.Request, limits: Limits) -> bytes:
    """The whole body, at most ``max_body_bytes``, received within ``body_timeout_seconds``."""
    limit = limits.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise bad("body", f"is {request.content_length} bytes; the limit is {limit}", 413)

    async def receive() -> bytes:
        data = bytearray()
        async for piece in request.content.iter_chunked(1 << 16):
            data += piece
            if len(data) > limit:
                raise bad("body", f"is over the {limit}-byte limit", 413)
        return bytes(data)

    return await within(receive(), limits)


async def within(receiving, limits: Limits):
    try:
        return await asyncio.wait_for(receiving, limits.body_timeout_seconds)
    except asyncio.TimeoutError:
        raise bad("body", f"was not received within {limits.body_timeout_seconds:g} s",
                  408) from None


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped), in one
    pass; checked before ``json.loads``, which would recurse into a nesting bomb."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        elif byte in CLOSERS:
            depth -= 1
    return deepest


def parse_json(data: bytes, limits: Limits):
    if json_depth(data) > limits.max_json_depth:
        raise bad("body", f"nests deeper than {limits.max_json_depth} levels")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad("body", f"is not valid JSON ({e})") from None
    except RecursionError:  # not reached after the depth check; never a 500
        raise bad("body", "nests too deeply") from None


async def read_object(request: web.Request, limits: Limits, msgpack: bool = False):
    """A JSON body (``Content-Type: application/json``) or, where ``msgpack`` and installed,
    msgpack (``application/msgpack``); any other content type is a 415."""
    kind = request.content_type
    if kind == MSGPACK_TYPE and msgpack:
        unpack = msgpack_loader()
        if unpack is None:
            raise ApiError(415, "content-type: msgpack bodies need the ormsgpack or msgpack "
                                "package on the server; send JSON", "content-type")
        data = await read_body(request, limits)
        try:
            return unpack(data)
        except Exception:  # noqa: BLE001 - any decoder error is the client's bad body
            raise bad("body", "is not valid msgpack") from None
    header = request.headers.get("Content-Type")
    if header is None or kind not in JSON_TYPES:
        sent = kind if header else "a body without a content type"
        also = " (or application/msgpack)" if msgpack else ""
        raise ApiError(415, f"content-type: {sent} is not accepted; send application/json{also}",
                       "content-type", "unsupported_media_type")
    return parse_json(await read_body(request, limits), limits)


def msgpack_loader():
    for name in ("ormsgpack", "msgpack"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        return module.unpackb
    return None


async def read_form(request: web.Request, limits: Limits) -> dict:
    """A multipart/form-data body → {field: str | bytes}, within the size, time and part
    limits."""
    if not request.content_type.startswith("multipart/form-data"):
        raise ApiError(415, "content-type: send multipart/form-data with fields name, audio "
                            "(a file) and text", "content-type", "unsupported_media_type")

    async def receive() -> dict:
        reader, fields, total, parts = await request.multipart(), {}, 0, 0
        while (part := await reader.next()) is not None:
            parts += 1
            if parts > limits.max_form_parts:
                raise bad("body", f"has more than {limits.max_form_parts} form parts")
            if not isinstance(part, BodyPartReader):
                raise bad("body", "nested multipart parts are not accepted")
            data = bytearray()
            while piece := await part.read_chunk(1 << 16):
                data += piece
                total += len(piece)
                if total > limits.max_body_bytes:
                    raise bad("body", f"is over the {limits.max_body_bytes}-byte limit", 413)
            fields[part.name] = bytes(data) if part.filename else data.decode("utf-8", "replace")
        return fields

    try:
        return await within(receive(), limits)
    except (ValueError, AssertionError) as e:  # aiohttp's complaints about a broken form
        raise bad("body", "is not a readable multipart/form-data body") from e
