"""A ``.pth`` state dict read without torch's unpickler: ``codec.pth`` is a pickle, and every
torch's ``torch.load`` runs a pickle machine that a crafted file has escaped before (weights_only
bypasses: CVE-2025-32434 before 2.6, GHSA-63cw-57p8-fm3p / CVE-2026-24747 before 2.10). Here no
pickle is ever executed by Python's or torch's unpickler, on any torch.

The format (``torch.save`` since torch 1.6) is a zip archive ``<name>/``: ``data.pkl`` (the
object, a pickle whose tensors point at storages by a persistent id), ``data/<key>`` (each
storage's raw bytes), ``byteorder``, ``version``. ``read_state_dict`` reads it with a small
pickle machine of its own that knows exactly what a state dict needs:

* opcodes: protocols 2 to 5's for dicts, lists, tuples, strings, bytes, numbers, booleans,
  ``None``, the memo, ``GLOBAL``/``STACK_GLOBAL``, ``REDUCE``, ``BUILD`` and ``BINPERSID``;
  any other opcode is refused (``INST``, ``OBJ``, ``NEWOBJ``, extensions, buffers …);
* globals: ``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2`` and the typed
  storages ``torch.<Float|Double|Half|BFloat16|Long|Int|Short|Char|Byte|Bool>Storage``;
  naming any other is refused, before anything is built;
* what is done with them: ``OrderedDict()`` (no arguments) and ``BUILD`` on it with a dict
  (torch's ``_metadata``, ignored); ``_rebuild_tensor_v2(storage, offset, size, stride,
  requires_grad, {} [, metadata])`` with every argument's type and range checked and the view
  inside its storage; ``SETITEM(S)`` only on dicts (hashable keys of plain types),
  ``APPEND(S)`` only on lists; a persistent id only ``("storage", <typed storage>, key,
  location, numel)``;
* storages: read from ``data/<key>`` (its size must be ``numel`` elements, the zip's CRC is
  checked), little-endian only, each read once (views share it, as torch's do).

Memory is bounded by the file, not by what the archive declares: an entry is refused before
anything is allocated when it declares more bytes than the file holds (stored entries hold
their bytes as they are; ``torch.save`` never compresses), when a deflated entry would inflate
past twice its compressed size by more than ``INFLATE_ALLOWANCE`` (shared by the archive), or
when it is encrypted or compressed otherwise; a view may not need more elements than its
storage holds, and all views together at most ``2 × the file's size + VIEW_ALLOWANCE`` bytes (so
the weight-norm fold downstream costs what the file holds); the machine runs at most
``MAX_OPCODES`` opcodes. Integer dict keys must have distinct hashes (``|key| < 2**61 - 1``) and
tuple keys hold strings only, so building dicts stays linear.

Anything else is a ``CodecLoadError`` saying what was refused. The tensors are those
``torch.load(weights_only=True)`` gives, bit for bit (same dtype, shape, strides and sharing;
``requires_grad`` is not restored: these are weights for inference)."""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path

import torch

from .config import CodecLoadError

MAX_PICKLE_BYTES = 64 << 20  # data.pkl of a state dict holds names and shapes, not weights
MAX_DIMS = 64
MAX_OPCODES = 1 << 20  # opcodes the machine runs, each building one value at most (a codec's
# state dict runs ~60 000)
INFLATE_ALLOWANCE = 48 << 20  # bytes deflated entries may inflate past twice their size
VIEW_ALLOWANCE = 32 << 20  # bytes all views may take past twice the file's size
CHUNK = 1 << 20  # an entry is read this many bytes at a time
MAX_HASHED_INT = (1 << 61) - 1  # ints of smaller magnitude hash to themselves (no collisions)
MAX_INT = 1 << 48  # an element count, offset, size or stride (no machine holds more)
STORAGES = {
    "FloatStorage": torch.float32, "DoubleStorage": torch.float64,
    "HalfStorage": torch.float16, "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64, "IntStorage": torch.int32, "ShortStorage": torch.int16,
    "CharStorage": torch.int8, "ByteStorage": torch.uint8, "BoolStorage": torch.bool,
}
ORDERED_DICT = ("collections", "OrderedDict")
REBUILD_TENSOR = ("torch._utils", "_rebuild_tensor_v2")
ALLOWED = frozenset({ORDERED_DICT, REBUILD_TENSOR, *(("torch", s) for s in STORAGES)})
ALLOWED_TEXT = ("collections.OrderedDict, torch._utils._rebuild_tensor_v2 and the typed "
                "storages torch.FloatStorage … torch.BoolStorage")
KEY_TYPES = (str, int, bytes, bool, type(None))
COMPRESSION = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


def brief(value) -> str:
    """A value for an error message: a short repr of a plain value, else its type's name
    (never the repr of a crafted container, however deep)."""
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        big = isinstance(value, int) and value.bit_length() > 128
        return f"an integer of {value.bit_length()} bits" if big else repr(value)[:40]
    return f"a {type(value).__name__}"


class Refused(CodecLoadError):
    """The archive holds something a state dict does not (the message says what)."""


class Global:
    """An allowed global named by the pickle (never imported)."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


class Storage:
    """A typed storage of the archive: its dtype, element count and (read once) data."""

    def __init__(self, dtype: torch.dtype, key: str, numel: int):
        self.dtype, self.key, self.numel = dtype, key, numel
        self.data: torch.Tensor | None = None  # 1-D, numel elements


def read_state_dict(path: str | Path):
    """The object ``torch.save`` wrote to ``path`` (a state dict, or a dict holding one),
    read by the restricted machine (module docstring); ``CodecLoadError`` otherwise."""
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise not_a_zip(path)
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            return Archive(archive, str(path), size).load()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error) as e:
        raise CodecLoadError(f"cannot read {path}: a corrupt or truncated zip archive "
                             f"({type(e).__name__}: {str(e)[:200]})") from None
    except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
        if isinstance(e, CodecLoadError):
            raise
        # zipfile's own refusals (an encrypted entry, an unknown compression) carry reprs;
        # RecursionError is a RuntimeError
        raise CodecLoadError(f"cannot read {path}: a damaged archive (reading it raised "
                             f"{type(e).__name__})") from None
    except MemoryError:
        raise CodecLoadError(f"cannot read {path}: it needs more memory than this machine "
                             "has") from None


def not_a_zip(path: Path) -> CodecLoadError:
    """Why ``path``, not a zip archive, is not read: torch's legacy (pickle) format is refused,
    anything else is no torch checkpoint."""
    with open(path, "rb") as f:
        head = f.read(2)
    if head[:1] == b"\x80":
        return Refused(f"refusing to load {path}: it is in torch's legacy format (saved by "
                       "torch before 1.6 or with _use_new_zipfile_serialization=False), "
                       "which Sailfish does not read; save it again in the zip format")
    return CodecLoadError(f"cannot read {path}: it is not a torch checkpoint (a zip "
                          "archive); corrupt or truncated?")


class Archive:
    """One ``torch.save`` zip: its ``data.pkl`` run by ``Machine``, storages read on demand."""

    def __init__(self, archive: zipfile.ZipFile, name: str, size: int):
        self.archive, self.name, self.size = archive, name, size
        self.inflate_left = INFLATE_ALLOWANCE  # shared by every deflated entry
        self.views_left = 2 * size + VIEW_ALLOWANCE  # bytes all tensors' views may take
        pickles = [n for n in archive.namelist() if n.count("/") == 1
                   and n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise CodecLoadError(f"{name} is not a torch checkpoint: expected one "
                                 f"'<name>/data.pkl' in the archive, found {len(pickles)}")
        self.prefix = pickles[0][: -len("data.pkl")]
        self.storages: dict[str, Storage] = {}

    def load(self):
        order = self.entry("byteorder", optional=True, limit=64)
        if order is not None and order.strip() != b"little":
            raise self.refused(f"it was saved on a big-endian machine ({order.strip()[:16]!r}); "
                               "only little-endian archives are read")
        return Machine(self.entry("data.pkl", limit=MAX_PICKLE_BYTES), self).run()

    def refused(self, what: str) -> Refused:
        return Refused(f"refusing to load {self.name}: {what}")

    def entry(self, name: str, limit: int, optional: bool = False) -> bytes | None:
        try:
            info = self.archive.getinfo(self.prefix + name)
        except KeyError:
            if optional:
                return None
            raise CodecLoadError(
                f"{self.name}: the archive has no {self.prefix}{name}") from None
        if info.file_size > limit:
            raise self.refused(f"its {name} is {info.file_size} bytes, more than a state "
                               f"dict's {name} takes ({limit})")
        return bytes(self.read(info, info.file_size))

    def read(self, info: zipfile.ZipInfo, size: int) -> bytearray:
        """The ``size`` bytes of entry ``info``, checked against what the file holds before
        anything is allocated, then read a chunk at a time (the zip's CRC is checked at the
        end)."""
        self.admit(info)
        name = info.filename
        buffer = bytearray(size)
        view, got = memoryview(buffer), 0
        with self.archive.open(info) as f:
            while got < size:
                piece = f.read(min(CHUNK, size - got))
                if not piece:
                    break
                view[got:got + len(piece)] = piece
                got += len(piece)
            if got != size or f.read(1):
                raise CodecLoadError(f"{self.name}: {name} ends early (truncated?)")
        return buffer

    def admit(self, info: zipfile.ZipInfo) -> None:
        """Refuse entry ``info`` unless it is plain (stored or deflated, not encrypted), lies
        inside the file, and inflates within the archive's allowance (then charged to it)."""
        name = info.filename
        if info.flag_bits & 0x61:  # encrypted, strongly encrypted, or a patch
            raise self.refused(f"{name} is encrypted or patched (general purpose flags "
                               f"{info.flag_bits:#x})")
        if info.compress_type not in COMPRESSION:
            raise self.refused(f"{name} is compressed with method {info.compress_type} (a "
                               "checkpoint's entries are stored or deflated)")
        if info.compress_size > self.size or info.header_offset + info.compress_size > self.size:
            raise self.refused(f"{name} declares {info.compress_size} bytes in the archive, but "
                               f"the file has {self.size} bytes (truncated or crafted)")
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise self.refused(f"{name} is stored uncompressed as {info.compress_size} bytes "
                               f"but declares {info.file_size}")
        if info.compress_type == zipfile.ZIP_DEFLATED:
            growth = max(0, info.file_size - 2 * info.compress_size)
            if growth > self.inflate_left:
                raise self.refused(
                    f"{name} inflates from {info.compress_size} to {info.file_size} bytes; "
                    f"deflated entries may grow past twice their size by "
                    f"{INFLATE_ALLOWANCE >> 20} MiB in all (torch.save stores them uncompressed)")
            self.inflate_left -= growth

    def storage(self, kind: Global, key, location, numel) -> Storage:
        """The storage a persistent id names, checked against its archive entry."""
        if not isinstance(key, str) or not key or "/" in key or key.startswith("."):
            raise self.refused(f"a storage key must be a plain name, got {brief(key)}")
        if not isinstance(location, str) or len(location) > 64:
            raise self.refused(f"storage {key}: bad location {brief(location)}")
        if type(numel) is not int or not 0 <= numel < MAX_INT:
            raise self.refused(f"storage {key}: bad element count {brief(numel)}")
        dtype = STORAGES[kind.name]
        found = self.storages.get(key)
        if found is not None:
            if found.dtype != dtype or found.numel != numel:
                raise self.refused(f"storage {key} is named twice with different types or "
                                   "sizes")
            return found
        storage = Storage(dtype, key, numel)
        self.storages[key] = storage
        return storage

    def data(self, storage: Storage) -> torch.Tensor:
        """The storage's elements, read once from ``data/<key>`` (its size checked first)."""
        if storage.data is None:
            name = f"{self.prefix}data/{storage.key}"
            try:
                info = self.archive.getinfo(name)
            except KeyError:
                raise self.refused(
                    f"storage {storage.key} has no {name} in the archive") from None
            size = storage.numel * torch.empty(0, dtype=storage.dtype).element_size()
            if info.file_size != size:
                kind = str(storage.dtype).removeprefix("torch.")
                raise self.refused(f"storage {storage.key} should hold {storage.numel} {kind} "
                                   f"values ({size} bytes), but {name} has {info.file_size} "
                                   "bytes")
            buffer = self.read(info, size)
            storage.data = (torch.frombuffer(buffer, dtype=storage.dtype) if size
                            else torch.empty(0, dtype=storage.dtype))
        return storage.data


# ---------------------------------------------------------------- the pickle machine
MARK = object()


class Machine:
    """Runs a state dict's pickle (opcodes and globals of the module docstring only)."""

    def __init__(self, data: bytes, archive: Archive):
        self.data, self.at, self.archive = data, 0, archive
        self.stack: list = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}
        self.name = archive.name

    # -- reading
    def refuse(self, what: str) -> Refused:
        return Refused(f"refusing to load {self.name}: {what} (at byte {self.at} of its "
                       "data.pkl); a state dict holds only tensors, numbers, strings and "
                       "containers, so this file is damaged or was made to run code when "
                       "unpickled")

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise self.refuse(f"a value runs past the end of the pickle ({n} bytes wanted)")
        piece = self.data[self.at:self.at + n]
        self.at += n
        return piece

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def line(self) -> str:
        end = self.data.find(b"\n", self.at, self.at + 256)
        if end < 0:
            raise self.refuse("a GLOBAL name is not terminated")
        text = self.data[self.at:end].decode("utf-8", "replace")
        self.at = end + 1
        return text

    def pop(self):
        if not self.stack or self.stack[-1] is MARK:
            raise self.refuse("an opcode takes a value the stack does not have")
        return self.stack.pop()

    def pop_mark(self) -> list:
        if not self.marks:
            raise self.refuse("an opcode takes a MARK the stack does not have")
        start = self.marks.pop()
        items = self.stack[start + 1:]
        if any(item is MARK for item in items):
            raise self.refuse("marks are nested wrongly")
        del self.stack[start:]
        return items

    def top(self):
        if not self.stack or self.stack[-1] is MARK:
            raise self.refuse("an opcode works on a value the stack does not have")
        return self.stack[-1]

    # -- running
    def run(self):
        ops = OPS
        for _ in range(MAX_OPCODES):
            if self.at >= len(self.data):
                raise self.refuse("the pickle ends without STOP (truncated)")
            code = self.data[self.at]
            self.at += 1
            op = ops.get(code)
            if op is None:
                raise self.refuse(f"opcode {bytes([code])!r} is not one a state dict needs")
            if op is STOP:
                if len(self.stack) != 1 or self.marks:
                    raise self.refuse("STOP with a stack that is not one value")
                return finished(self.stack[0], self)
            op(self)
        raise self.refuse(f"more than {MAX_OPCODES} opcodes (a state dict's pickle runs far "
                          "fewer)")

    def global_(self, module: str, name: str) -> Global:
        if (module, name) not in ALLOWED:
            raise self.refuse(f"it names the global {module}.{name}, which is not one a state "
                              f"dict needs (allowed: {ALLOWED_TEXT})")
        return Global(module, name)

    def reduce(self, function, args):
        if not isinstance(function, Global):
            raise self.refuse(f"REDUCE calls a {type(function).__name__}, not an allowed global")
        if not isinstance(args, tuple):
            raise self.refuse("REDUCE with arguments that are not a tuple")
        if (function.module, function.name) == ORDERED_DICT:
            if args:
                raise self.refuse("OrderedDict is built with arguments (SETITEMS fills it)")
            return OrderedDict()
        if (function.module, function.name) == REBUILD_TENSOR:
            return (self.tensor(*args) if 6 <= len(args) <= 7 else
                    self._bad_tensor(f"{len(args)} arguments"))
        raise self.refuse(f"REDUCE calls {function.dotted}, which builds nothing a state dict "
                          "holds")

    def _bad_tensor(self, what: str):
        raise self.refuse(f"_rebuild_tensor_v2 with {what}")

    def tensor(self, storage, offset, size, stride, requires_grad, hooks, metadata=None):
        """``_rebuild_tensor_v2``: a view of ``storage``, every argument checked."""
        self._check_tensor(storage, offset, size, stride, requires_grad, hooks, metadata)
        count = self._view_count(storage, offset, size, stride)
        data = self.archive.data(storage)  # its declared size checked against the file
        nbytes = count * data.element_size()
        if nbytes > self.archive.views_left:
            self._bad_tensor(f"views of more bytes in all than the file holds ({self.archive.size}"
                             " bytes; at most twice that plus "
                             f"{VIEW_ALLOWANCE >> 20} MiB)")
        self.archive.views_left -= nbytes
        return data.as_strided(size, stride, offset)

    def _check_tensor(self, storage, offset, size, stride, requires_grad, hooks, metadata):
        """The arguments' types: a storage, integers in range, no grad flag, hooks or metadata."""
        if not isinstance(storage, Storage):
            self._bad_tensor("a first argument that is not a storage")
        ints = ((offset, *size, *stride) if isinstance(size, tuple) and
                isinstance(stride, tuple) else None)
        if ints is None or any(type(v) is not int or not 0 <= v < MAX_INT for v in ints):
            self._bad_tensor("an offset, size or stride that is not a tuple of integers >= 0 "
                             "and < 2**48")
        if len(size) != len(stride) or len(size) > MAX_DIMS:
            self._bad_tensor(f"{len(size)} sizes and {len(stride)} strides")
        if type(requires_grad) is not bool:
            self._bad_tensor("requires_grad that is not a boolean")
        if not isinstance(hooks, OrderedDict) or hooks:
            self._bad_tensor("backward hooks (a state dict has none)")
        if metadata is not None and metadata != {}:
            self._bad_tensor("tensor metadata (a state dict has none)")

    def _view_count(self, storage: Storage, offset: int, size: tuple, stride: tuple) -> int:
        """How many values the view holds, checked to lie inside ``storage`` and not to repeat
        its elements."""
        count = 1
        for n in size:
            count *= n
        last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if count else offset
        if (count and last >= storage.numel) or offset > storage.numel:
            self._bad_tensor(f"a view past the end of storage {storage.key} (offset {offset}, "
                             f"size {size}, stride {stride}; the storage holds "
                             f"{storage.numel} values)")
        if count > storage.numel:  # a view repeating its storage's elements (a zero stride)
            self._bad_tensor(f"a view of {count} values over storage {storage.key}, which "
                             f"holds {storage.numel} (a state dict's tensors are views inside "
                             "their storage, never repeating it)")
        return count

    def persistent(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], Global) and pid[1].module == "torch"
                and pid[1].name in STORAGES):
            raise self.refuse("a persistent id other than ('storage', <typed storage>, key, "
                              "location, size)")
        return self.archive.storage(*pid[1:])


def finished(value, machine: Machine):
    """The result: plain containers, numbers, strings and tensors only (no storage or global
    left loose)."""
    seen, todo = set(), [value]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, (Storage, Global)):
            raise machine.refuse(f"a bare {type(item).__name__.lower()} in the result")
        if isinstance(item, dict):
            todo += item.values()
        elif isinstance(item, (list, tuple)):
            todo += item
    return value


# ---------------------------------------------------------------- opcodes
def mark(m: Machine) -> None:
    m.marks.append(len(m.stack))
    m.stack.append(MARK)


def tuple_n(n: int):
    def build(m: Machine) -> None:
        items = [m.pop() for _ in range(n)]
        m.stack.append(tuple(reversed(items)))
    return build


def dict_(m: Machine) -> None:  # DICT: (MARK k v …) → a dict
    items = m.pop_mark()
    m.stack.append({})
    setitems(m, items)


def setitem(m: Machine) -> None:
    value, key = m.pop(), m.pop()
    setitems(m, [key, value])


def setitems(m: Machine, pairs: list) -> None:
    target = m.top()
    if not isinstance(target, dict):
        raise m.refuse(f"SETITEM on a {type(target).__name__} (only dicts take items)")
    if len(pairs) % 2:
        raise m.refuse("SETITEMS with an odd number of values")
    for key, value in zip(pairs[::2], pairs[1::2]):
        if not (isinstance(key, KEY_TYPES) or (isinstance(key, tuple)
                                                and all(isinstance(k, str) for k in key))):
            what = ("tuple holding other than strings" if isinstance(key, tuple)
                    else type(key).__name__)
            raise m.refuse(f"a dict key of type {what}")
        if type(key) is int and not -MAX_HASHED_INT < key < MAX_HASHED_INT:
            # such ints can share a hash, and thousands that do make a dict quadratic
            raise m.refuse(f"an integer dict key of {key.bit_length()} bits (at most 60)")
        target[key] = value


def appends(m: Machine, items: list) -> None:
    target = m.top()
    if not isinstance(target, list):
        raise m.refuse(f"APPEND on a {type(target).__name__} (only lists take items)")
    target.extend(items)


def build(m: Machine) -> None:
    state = m.pop()
    target = m.top()
    if not isinstance(target, OrderedDict) or not isinstance(state, dict):
        raise m.refuse(f"BUILD on a {type(target).__name__} (only a state dict's metadata is "
                       "set this way)")  # torch's _metadata: not needed, not kept


def memo_put(m: Machine, index: int) -> None:
    m.memo[index] = m.top()


def memo_get(m: Machine, index: int) -> None:
    if index not in m.memo:
        raise m.refuse(f"memo entry {index} read before it was written")
    m.stack.append(m.memo[index])


def long1(m: Machine) -> int:
    n = m.unpack("<B")
    return int.from_bytes(m.take(n), "little", signed=True)


def text(m: Machine, n: int) -> str:
    try:
        return m.take(n).decode("utf-8")
    except UnicodeDecodeError:
        raise m.refuse("a string that is not UTF-8") from None


def global_(m: Machine) -> None:  # GLOBAL: "module\nname\n"
    module = m.line()
    m.stack.append(m.global_(module, m.line()))


def stack_global(m: Machine) -> None:
    name, module = m.pop(), m.pop()
    if not isinstance(module, str) or not isinstance(name, str):
        raise m.refuse("STACK_GLOBAL with names that are not strings")
    m.stack.append(m.global_(module, name))


def reduce(m: Machine) -> None:
    args, function = m.pop(), m.pop()
    m.stack.append(m.reduce(function, args))


def push(make):
    return lambda m: m.stack.append(make(m))


STOP = object()
OPS = {  # opcode → what it does (pickletools names them)
    0x80: lambda m: m.take(1),  # PROTO
    0x95: lambda m: m.take(8),  # FRAME
    ord("."): STOP,
    ord("("): mark,
    ord("}"): push(lambda m: {}),  # EMPTY_DICT
    ord("]"): push(lambda m: []),  # EMPTY_LIST
    ord(")"): push(lambda m: ()),  # EMPTY_TUPLE
    ord("t"): push(lambda m: tuple(m.pop_mark())),  # TUPLE
    0x85: tuple_n(1), 0x86: tuple_n(2), 0x87: tuple_n(3),
    ord("l"): push(lambda m: m.pop_mark()),  # LIST
    ord("d"): dict_,
    ord("s"): setitem,
    ord("u"): lambda m: setitems(m, m.pop_mark()),  # SETITEMS
    ord("a"): lambda m: appends(m, [m.pop()]),  # APPEND
    ord("e"): lambda m: appends(m, m.pop_mark()),  # APPENDS
    ord("N"): push(lambda m: None),
    0x88: push(lambda m: True),
    0x89: push(lambda m: False),
    ord("J"): push(lambda m: m.unpack("<i")),  # BININT
    ord("K"): push(lambda m: m.unpack("<B")),  # BININT1
    ord("M"): push(lambda m: m.unpack("<H")),  # BININT2
    0x8A: push(long1),
    ord("G"): push(lambda m: m.unpack(">d")),  # BINFLOAT
    ord("X"): push(lambda m: text(m, m.unpack("<I"))),  # BINUNICODE
    0x8C: push(lambda m: text(m, m.unpack("<B"))),  # SHORT_BINUNICODE
    0x8D: push(lambda m: text(m, m.unpack("<Q"))),  # BINUNICODE8
    ord("B"): push(lambda m: m.take(m.unpack("<I"))),  # BINBYTES
    ord("C"): push(lambda m: m.take(m.unpack("<B"))),  # SHORT_BINBYTES
    ord("q"): lambda m: memo_put(m, m.unpack("<B")),  # BINPUT
    ord("r"): lambda m: memo_put(m, m.unpack("<I")),  # LONG_BINPUT
    0x94: lambda m: memo_put(m, len(m.memo)),  # MEMOIZE
    ord("h"): lambda m: memo_get(m, m.unpack("<B")),  # BINGET
    ord("j"): lambda m: memo_get(m, m.unpack("<I")),  # LONG_BINGET
    ord("c"): global_,
    0x93: stack_global,
    ord("R"): reduce,
    ord("b"): build,
    ord("Q"): push(lambda m: m.persistent(m.pop())),  # BINPERSID
}
