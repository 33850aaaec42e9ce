"""Request bodies, read within bounds: a size limit, a time limit to receive them, the content
type each route takes (so a web page cannot send a "simple" cross-site request that is parsed
as JSON), and what parsing may cost. Every failure is an ``ApiError`` naming ``body`` or
``content-type``; a client that leaves while its body is read ends the request quietly
(``ClientGone``).

Parsing (JSON, msgpack, multipart) runs on an executor thread, never on the event loop, and
is bounded before it starts: the count of JSON structure bytes (``Limits.json_items``), the
nesting depth, the number of form parts. A body without reference audio is small
(``Limits.request_bytes``); only one that carries references may use ``max_body_bytes``."""

from __future__ import annotations

import asyncio
import json
import re
from email.message import Message
from email.parser import HeaderParser

from aiohttp import web

from ..limits import Limits
from .errors import ApiError, ClientGone, bad

JSON_TYPES = ("application/json",)
MSGPACK_TYPE = "application/msgpack"
STRUCTURE = re.compile(rb'[\[\]{}"\\]')  # what the depth scan looks at
STRUCTURE_BYTES = (b",", b":", b"[", b"{", b'"', b"\\")
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
MAX_PART_HEADER_BYTES = 8192
# Digits of a JSON integer: every integer field fits in 20 (seeds are < 2**63); Python refuses
# to read one of over 4300 digits, and a float field cannot hold one of over 308.
MAX_INT_DIGITS = 64
REFERENCE_KEYS = ("references", "ref_audio")  # what lets a speech body be large


async def read_body(request: web.Request, limits: Limits, limit: int | None = None) -> bytes:
    """The whole body, at most ``limit`` bytes (default ``max_body_bytes``), received within
    ``body_timeout_seconds``."""
    limit = limits.max_body_bytes if limit is None else limit
    if request.content_length is not None and request.content_length > limit:
        raise bad("body", f"is {request.content_length} bytes; the limit is {limit}", 413)

    async def receive() -> bytes:
        data = bytearray()
        async for piece in request.content.iter_chunked(1 << 16):
            data += piece
            if len(data) > limit:
                raise bad("body", f"is over the {limit}-byte limit", 413)
        return bytes(data)

    try:
        return await within(receive(), limits)
    except ConnectionResetError:  # the client left mid-body: nobody to answer
        raise ClientGone() from None


async def within(receiving, limits: Limits):
    try:
        return await asyncio.wait_for(receiving, limits.body_timeout_seconds)
    except asyncio.TimeoutError:
        raise bad("body", f"was not received within {limits.body_timeout_seconds:g} s",
                  408) from None


async def off_loop(function, *args):
    """``function(*args)`` on the default executor (parsing never blocks other clients)."""
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


# ---------------------------------------------------------------- JSON
def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped), in one pass
    over its brackets, quotes and backslashes (found in C); checked before ``json.loads``,
    which would recurse into a nesting bomb."""
    depth = deepest = 0
    in_string, escaped = False, -1  # escaped: the position a backslash escapes
    for found in STRUCTURE.finditer(data):
        at = found.start()
        byte = data[at]
        if in_string:
            if at == escaped:
                continue
            if byte == 0x5C:  # backslash
                escaped = at + 1
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def structure_count(data: bytes) -> int:
    """Bytes of ``data`` that can make JSON structure (an upper bound on its values)."""
    return sum(data.count(b) for b in STRUCTURE_BYTES)


def parse_json(data: bytes, limits: Limits, where: str = "body"):
    """A JSON text within the structure budget and depth, every string UTF-8 text (errors
    name ``where``, or the field holding a lone surrogate). Runs on an executor thread."""
    items = structure_count(data)
    if items > limits.json_items():
        raise bad(where, f"has {items} JSON structure characters; a request holds at most "
                         f"{limits.json_items()} (is it a speech request?)")
    if json_depth(data) > limits.max_json_depth:
        raise bad(where, f"nests deeper than {limits.max_json_depth} levels")
    try:
        value = json.loads(data, parse_int=bounded_int)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(where, f"is not valid JSON ({e})") from None
    except LongInteger as e:
        raise bad(where, f"holds an integer of {e.digits} digits; integers here have at most "
                         f"{MAX_INT_DIGITS}") from None
    except RecursionError:  # not reached after the depth check; never a 500
        raise bad(where, "nests too deeply") from None
    if SURROGATE_ESCAPE.search(data):  # a \ud800 escape: look for one left alone
        check_strings(value, "", where)
    return value


class LongInteger(Exception):
    def __init__(self, digits: int):
        self.digits = digits


def bounded_int(text: str) -> int:
    """A JSON integer of at most ``MAX_INT_DIGITS`` digits (``json.loads``'s ``parse_int``)."""
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise LongInteger(digits)
    return int(text)


def check_strings(value, path: str, root: str = "body") -> None:
    """A 400 naming the first field (key or value) that holds a lone surrogate (``root``: how
    the whole document is named)."""
    if isinstance(value, str):
        if not _utf8(value):
            raise bad(path or root, "holds a lone surrogate (a \\ud800-\\udfff escape not part "
                                    "of a pair), which is not text; send UTF-8 text")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not _utf8(key):
                raise bad(path or root, "has a key holding a lone surrogate; send UTF-8 text")
            check_strings(item, f"{path}.{key}" if path else key, root)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_strings(item, f"{path}[{i}]", root)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_size(body, size: int, limits: Limits, where: str = "body") -> None:
    """Only a request that carries reference audio may be over ``Limits.request_bytes``."""
    if size > limits.request_bytes() and not (
            isinstance(body, dict) and any(body.get(k) for k in REFERENCE_KEYS)):
        raise bad(where, f"is {size} bytes without reference audio; such a request is at most "
                         f"{limits.request_bytes()} bytes", 413)


async def read_object(request: web.Request, limits: Limits, msgpack: bool = False,
                      references: bool = False):
    """A JSON body (``Content-Type: application/json``) or, where ``msgpack`` and installed,
    msgpack (``application/msgpack``); any other content type is a 415. ``references``: the
    body may carry reference audio (up to ``max_body_bytes``); otherwise it is at most
    ``Limits.request_bytes``."""
    limit = limits.max_body_bytes if references else limits.request_bytes()
    kind = request.content_type
    if kind == MSGPACK_TYPE and msgpack:
        unpack = msgpack_loader()
        if unpack is None:
            raise ApiError(415, "content-type: msgpack bodies need the ormsgpack or msgpack "
                                "package on the server; send JSON", "content-type")
        data = await read_body(request, limits, limit)
        body = await off_loop(parse_msgpack, unpack, data)
    else:
        check_json_type(request, msgpack)
        data = await read_body(request, limits, limit)
        body = await off_loop(parse_json, data, limits)
    check_size(body, len(data), limits)
    return body


def check_json_type(request: web.Request, msgpack: bool) -> None:
    """A 415 unless the body says it is JSON (``msgpack``: msgpack is accepted too)."""
    kind, header = request.content_type, request.headers.get("Content-Type")
    if header is None or kind not in JSON_TYPES:
        sent = kind if header else "a body without a content type"
        also = " (or application/msgpack)" if msgpack else ""
        raise ApiError(415, f"content-type: {sent} is not accepted; send application/json"
                            f"{also}", "content-type", "unsupported_media_type")


def parse_msgpack(unpack, data: bytes):
    try:
        return unpack(data)
    except Exception:  # noqa: BLE001 - any decoder error is the client's bad body
        raise bad("body", "is not valid msgpack") from None


def msgpack_loader():
    for name in ("ormsgpack", "msgpack"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        return module.unpackb
    return None


# ---------------------------------------------------------------- multipart/form-data
async def read_form(request: web.Request, limits: Limits) -> dict:
    """A multipart/form-data body → {field: str | bytes}, within the size, time and part
    limits; received on the event loop, parsed on an executor thread."""
    if not request.content_type.startswith("multipart/form-data"):
        raise ApiError(415, "content-type: send multipart/form-data with fields name, audio "
                            "(a file) and text", "content-type", "unsupported_media_type")
    boundary = form_boundary(request.headers.get("Content-Type", ""))
    data = await read_body(request, limits)
    return await off_loop(parse_form, data, boundary, limits)


def form_boundary(content_type: str) -> bytes:
    message = Message()
    message["Content-Type"] = content_type
    boundary = message.get_param("boundary")
    if not isinstance(boundary, str) or not 1 <= len(boundary) <= 70 or not boundary.isascii():
        raise bad("content-type", "multipart/form-data needs a boundary of 1-70 characters")
    return boundary.encode("ascii")


def parse_form(data: bytes, boundary: bytes, limits: Limits) -> dict:
    """RFC 7578 form data: parts between ``--boundary`` lines (CRLF), each with a
    ``Content-Disposition: form-data; name=…[; filename=…]`` header. Files (a filename) are
    bytes, other fields UTF-8 text."""
    delimiter = b"--" + boundary
    at = first_part(data, delimiter)
    fields: dict = {}
    parts = 0
    while not data.startswith(b"--", at):  # until the close delimiter
        parts += 1
        if parts > limits.max_form_parts:
            check_part_line(data, at)  # a broken line is unreadable, as in any part
            raise bad("body", f"has more than {limits.max_form_parts} form parts")
        name, filename, content, at = read_part(data, at, delimiter)
        if name is not None:
            fields[name] = (content if filename is not None else
                            content.decode("utf-8", "replace"))
    return fields


def unreadable() -> ApiError:
    return bad("body", "is not a readable multipart/form-data body")


def first_part(data: bytes, delimiter: bytes) -> int:
    """Where the first part's delimiter line ends (after any preamble)."""
    if data.startswith(delimiter):
        return len(delimiter)
    at = data.find(b"\r\n" + delimiter)
    if at < 0:
        raise unreadable()
    return at + 2 + len(delimiter)


def check_part_line(data: bytes, at: int) -> int:
    """The end of a delimiter line (only white space after the delimiter)."""
    line_end = data.find(b"\r\n", at)
    if line_end < 0 or data[at:line_end].strip(b" \t"):
        raise unreadable()
    return line_end


def read_part(data: bytes, at: int, delimiter: bytes) -> tuple:
    """The part after the delimiter ending at ``at``: (name, filename, content, where the
    next delimiter ends)."""
    line_end = check_part_line(data, at)
    head_end = data.find(b"\r\n\r\n", line_end, line_end + MAX_PART_HEADER_BYTES)
    if head_end < 0:
        raise unreadable()
    name, filename = part_names(data[line_end + 2:head_end + 2])
    body_start = head_end + 4
    body_end = data.find(b"\r\n" + delimiter, body_start)
    if body_end < 0:
        raise unreadable()
    return name, filename, data[body_start:body_end], body_end + 2 + len(delimiter)


def part_names(head: bytes) -> tuple[str | None, str | None]:
    """(name, filename) of one part's headers (``None`` where absent)."""
    headers = HeaderParser().parsestr(head.decode("utf-8", "replace"))
    if headers.get_content_maintype() == "multipart":
        raise bad("body", "nested multipart parts are not accepted")
    disposition = headers.get("Content-Disposition")
    if disposition is None or headers.get_content_disposition() != "form-data":
        raise bad("body", "every part needs Content-Disposition: form-data")
    name = headers.get_param("name", header="content-disposition")
    name = name if isinstance(name, str) else None
    try:
        filename = headers.get_filename()
    except (LookupError, ValueError):  # RFC 2231 filename*= in a charset that cannot decode it
        raise bad(name or "body", "has a filename* (RFC 2231) that cannot be read; send "
                                  "filename=\"…\" or filename*=UTF-8''…") from None
    return name, filename if isinstance(filename, str) else None
