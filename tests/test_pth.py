"""``codec/pth.py``: torch's zip checkpoints read by our restricted machine, never by a torch or
Python unpickler: the same tensors as ``torch.load(weights_only=True)`` bit for bit (the fixture
codec.pth and state dicts of every storage type, shared and strided), and clear refusals of
everything a state dict does not need: crafted pickles (disallowed globals, SETITEM on a list,
BUILD on a tensor, opcodes that build objects), storages of the wrong size, views past their
storage, truncated archives."""

import io
import os
import pickle
import struct
import zipfile
from collections import OrderedDict

import pytest
import torch

from conftest import measure_peak_growth
from fish_core.codec.config import CodecLoadError
from fish_core.codec.pth import read_state_dict


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset()
            and torch.equal(a.reshape(-1).contiguous().view(torch.uint8),
                            b.reshape(-1).contiguous().view(torch.uint8)))


def assert_same(ours, ref) -> None:
    assert type(ours) is type(ref)
    if isinstance(ref, torch.Tensor):
        assert same_bits(ours, ref)
    elif isinstance(ref, dict):
        assert list(ours) == list(ref)
        for key in ref:
            assert_same(ours[key], ref[key])
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            assert_same(a, b)
    else:
        assert ours == ref


@pytest.fixture
def no_unpickler(monkeypatch):
    """Any use of torch's or Python's unpickler fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("an unpickler was used")

    import torch._weights_only_unpickler as weights_only

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(torch.serialization, "load", refuse)
    monkeypatch.setattr(weights_only, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)


# ---------------------------------------------------------------- what torch.save writes
def test_the_fixture_codec_is_read_bit_for_bit(ckpt_dir, monkeypatch):
    ref = torch.load(ckpt_dir / "codec.pth", map_location="cpu", weights_only=True)
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was used"))
    ours = read_state_dict(ckpt_dir / "codec.pth")
    assert isinstance(ours, dict) and len(ours) == len(ref) > 0
    assert_same(ours, ref)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_every_storage_type_views_and_sharing(tmp_path, protocol):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = OrderedDict([
        ("float", torch.randn(3, 5)), ("double", torch.randn(4, dtype=torch.float64)),
        ("half", torch.randn(7).half()), ("bf16", torch.randn(2, 3).bfloat16()),
        ("long", torch.arange(-5, 5)), ("int", torch.arange(9, dtype=torch.int32)),
        ("short", torch.arange(4, dtype=torch.int16)), ("char", torch.arange(-3, 3).char()),
        ("byte", torch.arange(8, dtype=torch.uint8)), ("bool", torch.tensor([True, False])),
        ("scalar", torch.tensor(3.5)), ("empty", torch.zeros(0, 4)),
        ("view", base[1:3, 2:5]), ("transposed", base.t()), ("base", base),
    ])
    state._metadata = {"": {"version": 1}}  # what module.state_dict() carries
    path = tmp_path / "all.pth"
    torch.save({"state_dict": state, "epoch": 3, "names": ["a", "b"], "lr": 1e-4}, path,
               pickle_protocol=protocol)
    # the oracle: torch's own reader (its weights_only machine takes protocol 2 only; the
    # other protocols' files are this test's own, so its full unpickler may read them)
    ref = torch.load(path, weights_only=protocol == 2)
    ours = read_state_dict(path)
    assert_same(ours, ref)
    views = ours["state_dict"]
    assert views["view"].untyped_storage().data_ptr() == views["base"].untyped_storage().data_ptr()
    assert not views["view"].is_contiguous()


def test_no_unpickler_is_used(ckpt_dir, no_unpickler):
    assert len(read_state_dict(ckpt_dir / "codec.pth")) > 0


def test_codec_loads_on_any_torch_version(ckpt_dir, monkeypatch, no_unpickler):
    """The reader does not depend on torch's weights_only: an old or vulnerable torch version
    (2.5, 2.9.1: CVE-2025-32434, CVE-2026-24747) reads the codec just the same."""
    from fish_core.codec.model import Codec

    for version in ("2.5.1+cu124", "2.9.1", "1.13.1"):
        monkeypatch.setattr(torch, "__version__", version)
        Codec.from_file(ckpt_dir / "codec.pth")


# ---------------------------------------------------------------- crafted archives
def archive(tmp_path, pickled: bytes, storages: dict | None = None, name: str = "evil",
            byteorder: bytes | None = b"little") -> str:
    """A zip laid out as torch.save lays it out, holding ``pickled`` as its data.pkl."""
    path = tmp_path / f"{name}.pth"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", pickled)
        if byteorder is not None:
            z.writestr(f"{name}/byteorder", byteorder)
        for key, data in (storages or {}).items():
            z.writestr(f"{name}/data/{key}", data)
        z.writestr(f"{name}/version", b"3\n")
    return str(path)


def op(code: str, *args: bytes) -> bytes:
    return code.encode("latin-1") + b"".join(args)


def text(value: str) -> bytes:
    data = value.encode()
    return op("X", struct.pack("<I", len(data)), data)


def glob(module: str, name: str) -> bytes:
    return op("c", f"{module}\n{name}\n".encode())


def tensor_ops(key: str, numel: int, size: tuple, stride: tuple, offset: int = 0,
               storage: str = "FloatStorage") -> bytes:
    """_rebuild_tensor_v2(('storage', torch.<storage>, key, 'cpu', numel), offset, size, …)."""
    def ints(values):
        return op("(") + b"".join(op("J", struct.pack("<i", v)) for v in values) + op("t")
    return (glob("torch._utils", "_rebuild_tensor_v2") + op("(")
            + op("(") + text("storage") + glob("torch", storage) + text(key) + text("cpu")
            + op("J", struct.pack("<i", numel)) + op("t") + op("Q")
            + op("J", struct.pack("<i", offset)) + ints(size) + ints(stride) + op("\x89")
            + glob("collections", "OrderedDict") + op(")") + op("R") + op("t") + op("R"))


def state_dict_ops(*items: bytes) -> bytes:
    """PROTO 2, an OrderedDict, SETITEMS with ``items`` (key and value ops), STOP."""
    return (op("\x80\x02") + glob("collections", "OrderedDict") + op(")") + op("R") + op("(")
            + b"".join(items) + op("u") + op("."))


FLOATS = struct.pack("<6f", *range(6))


def test_a_hand_made_state_dict_is_read(tmp_path):
    path = archive(tmp_path, state_dict_ops(text("w"), tensor_ops("0", 6, (2, 3), (3, 1))),
                   {"0": FLOATS})
    assert torch.equal(read_state_dict(path)["w"], torch.arange(6.0).reshape(2, 3))


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_disallowed_globals_are_refused_before_anything_runs(tmp_path, no_unpickler):
    marker = tmp_path / "pwned"
    for protocol in (2, 4):
        pickled = pickle.dumps({"w": Payload(marker)}, protocol=protocol)
        with pytest.raises(CodecLoadError, match=r"global posix\.system|global nt\.system"):
            read_state_dict(archive(tmp_path, pickled))
    for module, name in [("builtins", "eval"), ("torch", "load"), ("torch._utils",
                         "_rebuild_parameter"), ("torch", "UntypedStorage"),
                         ("collections", "defaultdict")]:
        with pytest.raises(CodecLoadError, match=rf"global {module}\.{name}, which is not"):
            read_state_dict(archive(tmp_path, op("\x80\x02") + glob(module, name) + op(".")))
    assert not marker.exists()


@pytest.mark.parametrize("pickled, why", [
    (op("\x80\x02") + op("]") + text("k") + text("v") + op("s") + op("."),
     "SETITEM on a list"),
    (op("\x80\x02") + tensor_ops("0", 6, (6,), (1,)) + op("(") + text("k") + text("v")
     + op("u") + op("."), "SETITEM on a Tensor"),
    (op("\x80\x02") + op("}") + op("(") + op("]") + text("v") + op("u") + op("."),
     "a dict key of type list"),
    (op("\x80\x02") + op("}") + text("x") + op("a") + op("."), "APPEND on a dict"),
    (state_dict_ops(text("w"), tensor_ops("0", 6, (6,), (1,)) + op("}") + op("b")),
     "BUILD on a Tensor"),
    (op("\x80\x02") + glob("collections", "OrderedDict") + op("(") + op("]") + op("t")
     + op("R") + op("."), "OrderedDict is built with arguments"),
    (op("\x80\x02") + op("}") + op(")") + op("R") + op("."), "REDUCE calls a dict"),
    (op("\x80\x02") + op("(") + text("storage") + glob("collections", "OrderedDict")
     + text("0") + text("cpu") + op("K", b"\x01") + op("t") + op("Q") + op("."),
     "persistent id"),
    (op("\x80\x02") + op("i") + b"os\nsystem\n" + op("."), r"opcode b'i'"),  # INST
    (op("\x80\x04") + op("\x8c\x02") + b"os" + op("\x8c\x06") + b"system" + op("\x93")
     + op("."), "global os.system"),  # STACK_GLOBAL
    (op("\x80\x02") + op("0") + op("."), r"opcode b'0'"),  # POP
    (op("\x80\x02") + op("h", b"\x07") + op("."), "memo entry 7"),
    (op("\x80\x02") + op("X", struct.pack("<I", 1 << 30)) + op("."), "runs past the end"),
    (op("\x80\x02") + op("}"), "without STOP"),
    (op("\x80\x02") + op("}") + op("}") + op("."), "not one value"),
    (op("\x80\x02") + op("t") + op("."), "MARK"),
], ids=["setitem-list", "setitems-tensor", "key-list", "append-dict", "build-tensor",
        "ordereddict-args", "reduce-dict", "persistent-id", "inst", "stack-global", "pop",
        "memo", "long-string", "no-stop", "two-values", "no-mark"])
def test_crafted_pickles_are_refused(tmp_path, pickled, why, no_unpickler):
    path = archive(tmp_path, pickled, {"0": FLOATS})
    with pytest.raises(CodecLoadError, match=why) as error:
        read_state_dict(path)
    assert "refusing to load" in str(error.value)


@pytest.mark.parametrize("tensor, storages, why", [
    (tensor_ops("0", 6, (2, 3), (3, 1)), {"0": FLOATS[:-4]},
     r"should hold 6 float32 values \(24 bytes\), but .* has 20 bytes"),
    (tensor_ops("0", 7, (7,), (1,)), {"0": FLOATS}, "should hold 7 float32"),
    (tensor_ops("0", 6, (2, 3), (3, 1), offset=1), {"0": FLOATS}, "past the end of storage"),
    (tensor_ops("0", 6, (3, 3), (3, 1)), {"0": FLOATS}, "past the end of storage"),
    (tensor_ops("0", 6, (2,), (1,), offset=7), {"0": FLOATS}, "past the end of storage"),
    (tensor_ops("0", 6, (2, 3), (-3, 1)), {"0": FLOATS}, "integers >= 0"),
    (tensor_ops("0", 6, (2, 3), (3,)), {"0": FLOATS}, "2 sizes and 1 strides"),
    (tensor_ops("1", 6, (6,), (1,)), {"0": FLOATS}, "has no evil/data/1"),
    (tensor_ops("../x", 6, (6,), (1,)), {"0": FLOATS}, "plain name"),
], ids=["short-storage", "numel-mismatch", "offset-past-end", "size-past-end", "far-offset",
        "negative-stride", "rank-mismatch", "missing-entry", "key-path"])
def test_storages_and_views_are_checked(tmp_path, tensor, storages, why):
    path = archive(tmp_path, state_dict_ops(text("w"), tensor), storages)
    with pytest.raises(CodecLoadError, match=why):
        read_state_dict(path)


def test_archives_that_are_not_torch_zips(tmp_path, ckpt_dir):
    data = (ckpt_dir / "codec.pth").read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 100):
        (tmp_path / "cut.pth").write_bytes(data[:cut])
        with pytest.raises(CodecLoadError, match="cannot read"):
            read_state_dict(tmp_path / "cut.pth")
    (tmp_path / "plain.pth").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CodecLoadError, match="not a torch checkpoint"):
        read_state_dict(tmp_path / "plain.pth")
    legacy = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, legacy, _use_new_zipfile_serialization=False)
    (tmp_path / "legacy.pth").write_bytes(legacy.getvalue())
    with pytest.raises(CodecLoadError, match="legacy format"):
        read_state_dict(tmp_path / "legacy.pth")
    big_endian = archive(tmp_path, state_dict_ops(), byteorder=b"big")
    with pytest.raises(CodecLoadError, match="big-endian"):
        read_state_dict(big_endian)
    with zipfile.ZipFile(tmp_path / "two.pth", "w") as z:
        z.writestr("a/data.pkl", b".")
        z.writestr("b/data.pkl", b".")
    with pytest.raises(CodecLoadError, match="found 2"):
        read_state_dict(tmp_path / "two.pth")


def test_a_damaged_storage_fails_its_crc(tmp_path):
    path = archive(tmp_path, state_dict_ops(text("w"), tensor_ops("0", 6, (6,), (1,))),
                   {"0": FLOATS})
    data = bytearray(open(path, "rb").read())
    at = bytes(data).find(FLOATS)
    data[at + 5] ^= 0xFF  # one flipped bit in the stored floats
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(CodecLoadError, match="CRC|corrupt"):
        read_state_dict(path)


# ---------------------------------------------------------------- bounded by the file
MB = 1 << 20


def refused_within(fn, why: str, bound: int = 128 * MB, warm: bool = False) -> str:
    """``fn()`` raises one CodecLoadError matching ``why``, growing the process < ``bound``
    (``warm``: measured on a second call, past torch's one-time start-up costs)."""
    error = []
    if warm:
        with pytest.raises(CodecLoadError, match=why):
            fn()

    def call():
        with pytest.raises(CodecLoadError, match=why) as e:
            fn()
        error.append(str(e.value))

    grown = measure_peak_growth(call)
    assert grown < bound, f"{grown / MB:.0f} MiB grown before the refusal"
    assert "<ZipInfo" not in error[0] and "Traceback" not in error[0]
    return error[0]


def patch_entry(path, name: str, **fields: int) -> None:
    """Rewrite ``name``'s header fields (flags, method, csize, usize) in both the local and
    the central directory's header: what a crafted archive declares."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    with zipfile.ZipFile(path) as z:
        local = z.getinfo(name).header_offset
    central = bytes(data).index(b"PK\x01\x02")  # the first central record
    while bytes(data[central + 46:central + 46 + len(name)]) != name.encode():
        central = bytes(data).index(b"PK\x01\x02", central + 4)
    at = {"flags": (6, 8, "<H"), "method": (8, 10, "<H"), "csize": (18, 20, "<I"),
          "usize": (22, 24, "<I")}
    for field, value in fields.items():
        local_at, central_at, fmt = at[field]
        struct.pack_into(fmt, data, local + local_at, value)
        struct.pack_into(fmt, data, central + central_at, value)
    with open(path, "wb") as f:
        f.write(data)


def one_storage(tmp_path, numel: int, size: tuple, stride: tuple, data: bytes,
                key: str = "w", compress: int = zipfile.ZIP_STORED) -> str:
    path = archive(tmp_path, state_dict_ops(text(key), tensor_ops("0", numel, size, stride)))
    with zipfile.ZipFile(path, "a", compress) as z:
        z.writestr("evil/data/0", data)
    return path


def test_a_storage_larger_than_its_bytes_in_the_file_is_refused_before_allocating(tmp_path):
    """A ~600-byte file declaring a 1 GiB storage: today's reader zero-filled 1 GiB first."""
    path = one_storage(tmp_path, 1 << 28, (1 << 28,), (1,), FLOATS)
    patch_entry(path, "evil/data/0", csize=1 << 30, usize=1 << 30)
    assert os.path.getsize(path) < 1000
    message = refused_within(lambda: read_state_dict(path), "declares 1073741824 bytes in the "
                             "archive, but the file has")
    assert message.startswith("refusing to load")
    # the same, deflated: it declares 1 GiB inflated from 24 bytes
    path = one_storage(tmp_path, 1 << 28, (1 << 28,), (1,), FLOATS,
                       compress=zipfile.ZIP_DEFLATED)
    patch_entry(path, "evil/data/0", usize=1 << 30)
    refused_within(lambda: read_state_dict(path), "inflates from .* to 1073741824 bytes")


def deflated_zeros(tmp_path, megabytes: int) -> str:
    """A state dict of one float32 storage of ``megabytes`` MiB of zeros, deflated (~1000:1),
    written a MiB at a time."""
    numel = megabytes * MB // 4
    path = archive(tmp_path, state_dict_ops(text("w"), tensor_ops("0", numel, (numel,), (1,))))
    zeros = bytes(MB)
    with (zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as z,
          z.open("evil/data/0", "w", force_zip64=True) as f):
        for _ in range(megabytes):
            f.write(zeros)
    return path


def test_a_deflate_bomb_is_refused_and_a_deflated_storage_costs_its_size(tmp_path):
    bomb = deflated_zeros(tmp_path, 256)
    assert os.path.getsize(bomb) < 400_000
    refused_within(lambda: read_state_dict(bomb), r"inflates from \d+ to 268435456 bytes")
    small = deflated_zeros(tmp_path, 16)  # within the allowance: read, costing its own size
    out = {}
    grown = measure_peak_growth(lambda: out.update(read_state_dict(small)))
    assert out["w"].shape == (4 * MB,) and not out["w"].any()
    assert grown < 16 * MB + 4 * MB, f"{grown / MB:.0f} MiB for a 16 MiB storage"


def test_a_view_repeating_its_storage_is_refused(tmp_path):
    """A ~750-byte file: one number viewed as a 8192 x 8192 matrix (strides 0), as the v of a
    weight-norm pair, which the fold expanded to 256 MiB before any shape check."""
    from fish_core.codec.model import Codec

    weight_g = tensor_ops("1", 8192, (8192, 1, 1), (1, 1, 1))
    path = archive(tmp_path, state_dict_ops(
        text("encoder.block.0.conv.weight_v"), tensor_ops("0", 1, (8192, 8192, 1), (0, 0, 0)),
        text("encoder.block.0.conv.weight_g"), weight_g), {"0": FLOATS[:4]})
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as z:
        z.writestr("evil/data/1", bytes(4 * 8192))
    assert os.path.getsize(path) < 1000
    refused_within(lambda: Codec.from_file(path), r"a view of 67108864 values over storage 0, "
                   "which holds 1", bound=64 * MB)
    # many views of one storage may not add up to more than the file holds either
    path = archive(tmp_path, state_dict_ops(*(
        text(f"w{i}") + tensor_ops("0", 4 * MB, (4 * MB,), (1,)) for i in range(40))))
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as z:
        z.writestr("evil/data/0", bytes(16 * MB))
    refused_within(lambda: Codec.from_file(path), "views of more bytes in all than the file")


@pytest.mark.parametrize("damage, why", [
    ({"flags": 1}, "encrypted"),
    ({"method": 99}, "compressed with method 99"),
    ({"method": 12}, "compressed with method 12"),  # bzip2: not what torch.save writes
], ids=["encrypted", "unknown-method", "bzip2"])
def test_damaged_entries_are_one_clear_error(tmp_path, damage, why):
    for entry in ("evil/data.pkl", "evil/data/0"):
        path = archive(tmp_path, state_dict_ops(text("w"), tensor_ops("0", 6, (6,), (1,))),
                       {"0": FLOATS})
        patch_entry(path, entry, **damage)
        refused_within(lambda path=path: read_state_dict(path), why)


def test_a_damaged_deflate_stream_is_one_clear_error(tmp_path):
    path = one_storage(tmp_path, 1024, (1024,), (1,), bytes(range(256)) * 16,
                       compress=zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("evil/data/0")
    start = info.header_offset + 30 + len(info.filename)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"\xff" * 8)  # not a deflate stream any more
    refused_within(lambda: read_state_dict(path), "cannot read .*corrupt")


@pytest.mark.parametrize("items, why", [
    ([op("J", struct.pack("<i", 7)), tensor_ops("0", 6, (6,), (1,))],
     "keyed by names .* type int"),
    ([op("C", b"\x01") + b"w", tensor_ops("0", 6, (6,), (1,))], "keyed by names .* type bytes"),
    ([text("encoder.block.0.conv.weight_g"), tensor_ops("0", 6, (3, 2), (2, 1)),
      text("encoder.block.0.conv.weight_v"), tensor_ops("0", 6, (2, 3, 1), (3, 1, 1))],
     "no weight-norm pair"),
    ([text("encoder.block.0.conv.weight_g"), tensor_ops("0", 6, (6,), (1,)),
      text("encoder.block.0.conv.weight_v"), tensor_ops("0", 6, (6,), (1,))],
     "no weight-norm pair"),
    ([text("quantizer.pre_module.layers.0.attention.wo.weight"),
      tensor_ops("0", 6, (6,), (1,)), text("quantizer.pre_module.layers.0.feed_forward.w1.weight"),
      tensor_ops("0", 6, (2, 3), (3, 1))], "does not match the codec"),
], ids=["int-key", "bytes-key", "g-shape", "v-1d", "wo-1d"])
def test_state_dicts_no_codec_has_are_one_clear_error(tmp_path, items, why):
    """Read fine as pickles, but not a codec: a CodecLoadError, never an AttributeError,
    TypeError or torch's RuntimeError."""
    from fish_core.codec.model import Codec

    path = archive(tmp_path, state_dict_ops(*items), {"0": FLOATS})
    refused_within(lambda: Codec.from_file(path), why, warm=True)


def test_integer_keys_that_hash_alike_are_refused(tmp_path):
    """Ints n * (2**61 - 1) all hash to 0: 40 000 of them took 19-28 s to put in a dict."""
    def int_key(value: int) -> bytes:
        raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
        return op("\x8a", bytes([len(raw)]), raw)  # LONG1

    same_hash = [int_key(n * ((1 << 61) - 1)) + op("N") for n in range(1, 5001)]
    path = archive(tmp_path, op("\x80\x02") + op("}") + op("(") + b"".join(same_hash)
                   + op("u") + op("."))
    assert len({hash(n * ((1 << 61) - 1)) for n in range(1, 5001)}) == 1
    refused_within(lambda: read_state_dict(path), "an integer dict key of 6[0-9] bits")
    # an optimizer's state keyed by parameter index still reads
    plain = [int_key(n) + op("N") for n in range(5000)]
    path = archive(tmp_path, op("\x80\x02") + op("}") + op("(") + b"".join(plain) + op("u")
                   + op("."))
    assert list(read_state_dict(path)) == list(range(5000))


def test_tuple_keys_of_numbers_are_refused(tmp_path):
    path = archive(tmp_path, op("\x80\x02") + op("}") + op("K", b"\x01") + op("K", b"\x02")
                   + op("\x86") + op("N") + op("s") + op("."))
    with pytest.raises(CodecLoadError, match="tuple holding other than strings"):
        read_state_dict(path)


def test_the_cli_says_one_error_line_for_a_damaged_codec(tmp_path, ckpt_dir, capsys):
    """An encrypted entry ended in a RuntimeError carrying zipfile's ``<ZipInfo …>`` repr."""
    import numpy as np

    from fish_core import cli

    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (model / name).write_bytes((ckpt_dir / name).read_bytes())
    path = archive(tmp_path, state_dict_ops(text("w"), tensor_ops("0", 6, (6,), (1,))),
                   {"0": FLOATS})
    patch_entry(path, "evil/data.pkl", flags=1)
    os.replace(path, model / "codec.pth")
    np.save(tmp_path / "c.npy", np.zeros((10, 2), dtype=np.int64))
    assert cli.main(["decode", str(tmp_path / "c.npy"), "--model", str(model), "--no-download",
                     "-o", str(tmp_path / "out.wav")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: refusing to load ") and err.count("\n") == 1, err
    assert "encrypted" in err and "ZipInfo" not in err


def test_errors_never_repr_what_the_file_built(tmp_path):
    """A storage location 100 000 lists deep: its repr was a RecursionError."""
    deep = op("]") * 100_000 + op("a") * 99_999
    pid = (op("(") + text("storage") + glob("torch", "FloatStorage") + text("0") + deep
           + op("K", b"\x06") + op("t") + op("Q"))
    path = archive(tmp_path, op("\x80\x02") + pid + op("."), {"0": FLOATS})
    message = refused_within(lambda: read_state_dict(path), "bad location a list")
    assert "[[" not in message
    huge = 1 << 100
    raw = huge.to_bytes(14, "little", signed=True)
    six = op("(") + op("J", struct.pack("<i", 6)) + op("t")  # the size tuple (6,)
    sized = tensor_ops("0", 6, (6,), (1,)).replace(six, op("(") + op("\x8a", b"\x0e", raw)
                                                    + op("t"))
    path = archive(tmp_path, state_dict_ops(text("w"), sized), {"0": FLOATS})
    refused_within(lambda: read_state_dict(path), r"integers >= 0 and < 2\*\*48")


def test_layer_counts_are_bounded_before_the_codec_is_built(tmp_path):
    """Empty tensors cost no bytes, but each 'quantizer.pre_module.layers.<i>.' key made the
    codec build one more layer (2000 layers: 16 s and 120 MB; 40 000 keys of a 2 MB file:
    gigabytes)."""
    from fish_core.codec.model import Codec

    prefix = "quantizer.pre_module.layers."
    layers = [text(f"{prefix}{i}.attention.wo.weight") + tensor_ops("0", 6, (0, 6), (6, 1))
              for i in range(2000)]
    layers += [text(f"{prefix}0.feed_forward.w1.weight"), tensor_ops("0", 6, (0, 6), (6, 1))]
    path = archive(tmp_path, state_dict_ops(*layers), {"0": FLOATS})
    refused_within(lambda: Codec.from_file(path),
                   r"more than 64 'quantizer\.pre_module\.layers\.<i>\.' blocks", warm=True)


def test_the_machine_runs_a_bounded_number_of_opcodes(tmp_path):
    """A 1 MB pickle of one-byte opcodes builds a value each; the machine stops at 2**20."""
    path = archive(tmp_path, op("\x80\x02") + op("]") * (1 << 20) + op("."))
    with pytest.raises(CodecLoadError, match="more than 1048576 opcodes"):
        read_state_dict(path)
