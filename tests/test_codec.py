"""Codec parity with the reference goldens, loading rules, chunking and receptive field."""

import json
import math
import pickle
from pathlib import Path

import pytest
import soundfile as sf
import torch
import torch.nn.functional as F

from conftest import read_sizes
from fish_core.audio.files import load_audio
from fish_core.codec.model import (BENCHMARKED_FRAMES, DEFAULT_CHUNK_FRAMES, GPU_CHUNK_FRAMES,
                                   Codec, build_codec, chunk_frames_for, convolution_flags,
                                   cudnn_benchmark_pays)
from fish_core.codec.checkpoint import read_checkpoint
from fish_core.codec.config import CodecConfig, CodecLoadError
from fish_core.codec.files import decode_to_file, encode_file
from fish_core.codec.layers import WN_LEGACY, WN_PARAMETRIZATIONS
from fish_core.params import CHUNK_FRAMES, FIRST_FRAMES
from fish_core.engine.device import CODEC_FAST_DECODE, CODEC_FAST_SNR_DB, codec_dtypes_for

TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def codec(ckpt_dir) -> Codec:
    return Codec.from_file(ckpt_dir)


@pytest.fixture(scope="session")
def gold(golden) -> dict:
    return golden.tensors("codec")


@pytest.fixture(scope="session")
def checkpoint(ckpt_dir) -> dict:
    return read_checkpoint(ckpt_dir / "codec.pth")


def checkpoint_shapes(codec: Codec) -> dict[str, tuple]:
    """Key -> shape as stored in the real ``codec.pth`` (weight norm unfolded into g/v)."""
    shapes = {k: tuple(v.shape) for k, v in codec.state_dict().items()}
    for name, module in codec.named_modules():
        keys = getattr(module, "weight_norm_keys", None)
        if keys:
            weight = shapes.pop(f"{name}.weight")
            shapes[f"{name}.{keys[0]}"] = (weight[0],) + (1,) * (len(weight) - 1)
            shapes[f"{name}.{keys[1]}"] = weight
    return shapes


def receptive_field(config: CodecConfig) -> dict:
    """Exact left context (in 44.1 kHz samples) behind one encoded frame / one decoded sample.

    Causal conv (kernel k, dilation d, stride s): (k-1)*d+1-s input steps. Causal transposed conv
    with kernel 2s: one input step. Windowed attention composes across layers: n_layer*(window-1)
    positions. Nothing looks right, so a chunk needs only this much history.
    """
    residual_units = sum(6 * d for d in (1, 3, 9))  # three k7 convs, dilations 1, 3, 9
    enc, step = 6, 1  # first conv k7 at 44.1 kHz
    for rate, layers in zip(config.encoder_rates, config.encoder_transformer_layers):
        enc += residual_units * step + rate * step  # residual units, then conv k=2*rate
        step *= rate
        enc += layers * (config.encoder_window - 1) * step
    enc += 2 * step  # last conv k3
    q = config.quantizer_transformer
    for factor in config.downsample_factors:
        step *= factor  # conv k=s: no overlap
        enc += 6 * step  # ConvNeXt depthwise k7
    enc += q.n_layer * (q.window - 1) * step

    step = config.frame_length
    dec = q.n_layer * (q.window - 1) * step
    for factor in reversed(config.downsample_factors):
        step //= factor  # transposed conv k=s: no overlap
        dec += 6 * step
    dec += 6 * step  # first decoder conv k7
    for rate in config.decoder_rates:
        dec += step  # transposed conv k=2*rate reaches one input step back
        step //= rate
        dec += residual_units * step
    dec += 6 * step  # last conv k7
    frame = config.frame_length
    return {"encode_samples": enc, "encode_frames": -(-enc // frame),
            "decode_samples": dec, "decode_frames": -(-dec // frame)}


def random_codes(codec: Codec, frames: int, seed: int = 0, batch: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.tensor([codec.config.semantic_codebook_size]
                         + [codec.config.codebook_size] * codec.config.n_codebooks)
    return (torch.rand(batch, codec.num_codebooks, frames, generator=gen) * sizes[:, None]).long()


def random_audio(codec: Codec, frames: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return 0.3 * torch.randn(1, 1, frames * codec.frame_length, generator=gen)


# --- parity with the reference ----------------------------------------------------------------


def test_encode_matches_golden(codec, gold):
    wave = gold["wave"]
    codes = codec.encode(wave)
    assert codes.dtype == torch.int64
    assert codes.shape == (1, codec.num_codebooks, math.ceil(wave.numel() / codec.frame_length))
    assert codes.shape[-1] == int(gold["code_lengths"][0])
    assert torch.equal(codes[0], gold["codes"])
    assert torch.equal(codec.encode(wave[None, None], chunk_frames=None)[0], gold["codes"])


def test_encoder_output_matches_golden(codec, gold):
    wave = gold["wave"]
    padded = F.pad(wave, (0, -wave.numel() % codec.frame_length))[None, None]
    z = codec.encoder(padded, {})
    torch.testing.assert_close(z[0], gold["encoder_out"], atol=1e-4, rtol=0)


def test_decode_latent_matches_golden(codec, gold):
    latent = codec.quantizer.decode(codec.clamp_codes(gold["codes"])[None], {})
    torch.testing.assert_close(latent[0], gold["decode_latent"], atol=1e-4, rtol=0)


def test_decode_matches_golden(codec, gold):
    wave = codec.decode(gold["codes"])
    assert wave.shape == (1, 1, gold["codes"].shape[-1] * codec.frame_length)
    assert wave.dtype == torch.float32
    torch.testing.assert_close(wave[0, 0], gold["decode"], atol=1e-4, rtol=0)


def test_decode_clamps_a_copy(codec, gold):
    codes = gold["codes2"].clone()
    wave = codec.decode(codes)
    assert torch.equal(codes, gold["codes2"]), "decode must not modify the caller's codes"
    torch.testing.assert_close(wave[0, 0], gold["decode2"], atol=1e-4, rtol=0)
    assert torch.equal(codec.clamp_codes(codes), gold["codes2_after_decode_inplace_clamp"])


def test_decode_batch_and_int32(codec, gold):
    codes = torch.stack([gold["codes2"], gold["codes2_after_decode_inplace_clamp"]]).int()
    wave = codec.decode(codes)
    assert wave.shape == (2, 1, codes.shape[-1] * codec.frame_length)
    torch.testing.assert_close(wave[0], wave[1], atol=0, rtol=0)
    torch.testing.assert_close(wave[0, 0], gold["decode2"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("bad, match", [
    (torch.zeros(read_sizes().num_codebooks, 4), "integer"),
    (torch.zeros(3, 4, dtype=torch.long), "shaped"),
    (torch.zeros(read_sizes().num_codebooks, 0, dtype=torch.long), "shaped"),
    (torch.full((read_sizes().num_codebooks, 4), -1, dtype=torch.long), "non-negative"),
])
def test_decode_rejects_bad_codes(codec, bad, match):
    with pytest.raises(ValueError, match=match):
        codec.decode(bad)


def test_encode_rejects_bad_audio(codec):
    with pytest.raises(ValueError, match="mono"):
        codec.encode(torch.zeros(1, 2, 4096))
    with pytest.raises(ValueError, match="float"):
        codec.encode(torch.zeros(4096, dtype=torch.int16))


# --- architecture and loading -----------------------------------------------------------------


def test_real_codec_on_meta_matches_manifest(fixtures):
    path = fixtures / "real-s2-manifest.json"
    found = path if path.is_file() else TESTS_DIR / "fixtures" / path.name
    manifest = json.loads(found.read_text())["codec"]
    expected = {t["key"]: tuple(t["shape"]) for t in manifest["tensors"]}
    codec = build_codec()  # real-size defaults, meta device
    assert all(p.is_meta for p in codec.parameters())
    shapes = checkpoint_shapes(codec)
    assert shapes == expected
    assert len(shapes) == manifest["n_tensors"] == 535
    assert sum(math.prod(s) for s in shapes.values()) == manifest["n_params"] == 391_430_530
    assert sum(k.endswith(WN_PARAMETRIZATIONS) for k in shapes) == 2 * 60
    assert sum(k.endswith(WN_LEGACY) for k in shapes) == 2 * 20


def test_fixture_key_layout_round_trips(codec, checkpoint):
    assert checkpoint_shapes(codec) == {k: tuple(v.shape) for k, v in checkpoint.items()}


def test_weight_norm_folded_once_and_no_buffers(codec):
    keys = codec.state_dict().keys()
    assert not any("parametrizations" in k or k.endswith(("weight_g", "weight_v")) for k in keys)
    assert not list(codec.buffers()), "no masks or tables may be stored"


def test_config_comes_from_json_and_shapes(codec, ckpt_dir, checkpoint):
    data = json.loads((ckpt_dir / "codec_config.json").read_text())
    cfg = codec.config
    assert cfg.encoder_window == data.get("encoder_transformer", {}).get(
        "window_size", data["transformer_general_config"].get("window_size", 512))
    assert cfg.quantizer_transformer.window == data["quantizer"]["pre_module"]["window_size"]
    assert cfg.latent_dim == data["latent_dim"] and cfg.decoder_dim == data["decoder_dim"]
    assert cfg.semantic_codebook_size == data["quantizer"]["semantic_codebook_size"]
    assert cfg.frame_length == data["frame_length"]
    # Without the json, shapes still decide the architecture; windows fall back to the real ones.
    bare = Codec.from_state_dict(checkpoint)
    assert bare.config.latent_dim == cfg.latent_dim
    assert (bare.config.encoder_window, bare.config.quantizer_transformer.window) == (512, 128)


def _restyle(state_dict: dict, src: tuple, dst: tuple) -> dict:
    out = {}
    for key, value in state_dict.items():
        for s, d in zip(src, dst):
            if key.endswith("." + s):
                key = key[: -len(s)] + d
        out[key] = value
    return out


def _assert_same_weights(a: Codec, b: Codec):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def test_both_weight_norm_styles_load_identically(codec, checkpoint):
    all_legacy = _restyle(checkpoint, WN_PARAMETRIZATIONS, WN_LEGACY)
    all_new = _restyle(checkpoint, WN_LEGACY, WN_PARAMETRIZATIONS)
    assert all_legacy.keys() != checkpoint.keys() != all_new.keys()
    for variant in (all_legacy, all_new):
        _assert_same_weights(codec, Codec.from_state_dict(variant, codec.config))
    folded = codec.state_dict()  # plain weights load as well
    _assert_same_weights(codec, Codec.from_state_dict(folded, codec.config))


def test_generator_prefix_and_state_dict_wrapper(codec, checkpoint, tmp_path):
    # A training checkpoint: wrapped, generator-prefixed, with other networks' weights beside it.
    wrapped = {"state_dict": {**{"generator." + k: v for k, v in checkpoint.items()},
                              "discriminator.conv.weight": torch.zeros(3)}}
    path = tmp_path / "codec.pth"
    torch.save(wrapped, path)
    _assert_same_weights(codec, Codec.from_file(path))


def test_strict_loading_lists_bad_keys(codec, checkpoint):
    broken = dict(checkpoint)
    missing = "quantizer.pre_module.norm.weight"
    reshaped = "decoder.model.0.conv.bias"
    del broken[missing]
    broken["decoder.extra.weight"] = torch.zeros(2)
    broken[reshaped] = torch.zeros(broken[reshaped].numel() + 1)
    with pytest.raises(CodecLoadError) as err:
        Codec.from_state_dict(broken, codec.config, name="broken.pth")
    message = str(err.value)
    assert "broken.pth" in message
    assert "missing keys (1)" in message and missing in message
    assert "unexpected keys (1)" in message and "decoder.extra.weight" in message
    assert "shape mismatches (1)" in message and reshaped in message


def test_unpaired_weight_norm_half_is_reported(codec, checkpoint):
    key = "encoder.block.0.conv.parametrizations.weight.original0"
    broken = {k: v for k, v in checkpoint.items() if k != key}
    with pytest.raises(CodecLoadError, match=r"(?s)missing keys.*encoder\.block\.0\.conv\.weight.*"
                                             r"unexpected keys.*original1"):
        Codec.from_state_dict(broken, codec.config)


class _Payload:
    """Unpickling this calls open(marker, "w"): it creates a file, i.e. runs code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def test_malicious_pickle_is_refused(tmp_path):
    live = tmp_path / "live-marker"
    pickle.loads(pickle.dumps(_Payload(live)))  # the payload really runs code under plain pickle
    assert live.exists()

    marker = tmp_path / "marker"
    path = tmp_path / "codec.pth"
    torch.save({"encoder.block.0.conv.bias": torch.zeros(1), "evil": _Payload(marker)}, path)
    with pytest.raises(CodecLoadError, match="refusing to load") as err:
        Codec.from_file(path)
    assert str(path) in str(err.value) and "open" in str(err.value)
    assert not marker.exists()


def test_missing_and_corrupt_checkpoint(tmp_path):
    with pytest.raises(CodecLoadError, match="not found"):
        Codec.from_file(tmp_path)
    (tmp_path / "codec.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(CodecLoadError, match="corrupt"):
        Codec.from_file(tmp_path / "codec.pth")
    torch.save({"a": torch.zeros(1000)}, tmp_path / "codec.pth")
    data = (tmp_path / "codec.pth").read_bytes()
    (tmp_path / "codec.pth").write_bytes(data[: len(data) // 2])  # truncated download
    with pytest.raises(CodecLoadError, match="cannot read"):
        Codec.from_file(tmp_path)


def test_bad_codec_config_json(ckpt_dir, tmp_path):
    (tmp_path / "codec.pth").write_bytes((ckpt_dir / "codec.pth").read_bytes())
    config = tmp_path / "codec_config.json"
    config.write_text("{not json")
    with pytest.raises(CodecLoadError, match="cannot read codec config"):
        Codec.from_file(tmp_path)
    data = json.loads((ckpt_dir / "codec_config.json").read_text())
    pre = data["quantizer"]["pre_module"]
    data["quantizer"]["post_module"] = {**pre, "window_size": pre["window_size"] + 1}
    config.write_text(json.dumps(data))
    with pytest.raises(CodecLoadError, match="pre_module and post_module"):
        Codec.from_file(tmp_path)


# --- chunking, causality, receptive field -----------------------------------------------------


@pytest.fixture(scope="module")
def long_audio(codec):
    rf = receptive_field(codec.config)
    return random_audio(codec, rf["encode_frames"] + 9, seed=1)


@pytest.fixture(scope="module")
def long_codes(codec):
    rf = receptive_field(codec.config)
    return random_codes(codec, rf["decode_frames"] + 11, seed=2)


def _not_a_multiple(frames: int, chunk: int) -> int:
    """A frame count just below `frames` that `chunk` (> 1) does not divide."""
    return frames - 1 if chunk > 1 and frames % chunk == 0 else frames


@pytest.mark.parametrize("chunk", [1, 3, 7, 16])
def test_chunked_encode_equals_whole(codec, long_audio, chunk):
    frames = _not_a_multiple(long_audio.shape[-1] // codec.frame_length, chunk)
    audio = long_audio[..., : frames * codec.frame_length - 100]  # a ragged tail as well
    whole = codec.encode(audio, chunk_frames=None)
    assert whole.shape[-1] == frames and chunk < frames
    assert torch.equal(codec.encode(audio, chunk_frames=chunk), whole)


@pytest.mark.parametrize("chunk", [1, 2, 5, 13])
def test_chunked_decode_equals_whole(codec, long_codes, chunk):
    codes = long_codes[..., : _not_a_multiple(long_codes.shape[-1], chunk)]
    whole = codec.decode(codes, chunk_frames=None)
    chunked = codec.decode(codes, chunk_frames=chunk)
    assert chunked.shape == whole.shape and chunk < codes.shape[-1]
    assert (chunked - whole).abs().max().item() <= 1e-5


def test_streaming_chunks_of_varying_size(codec, long_codes):
    whole = codec.decode(long_codes, chunk_frames=None)
    state, pieces, start = {}, [], 0
    for size in (1, 4, 2, 9, 3):
        pieces.append(codec.decode_chunk(long_codes[..., start:start + size], state))
        start += size
    got = torch.cat(pieces, dim=-1)
    assert (got - whole[..., : got.shape[-1]]).abs().max().item() <= 1e-5


def test_decode_prefix_is_stable(codec, long_codes):
    whole = codec.decode(long_codes, chunk_frames=None)
    for n in (1, 5, long_codes.shape[-1] - 1):
        prefix = codec.decode(long_codes[..., :n], chunk_frames=None)
        assert (prefix - whole[..., : n * codec.frame_length]).abs().max().item() <= 1e-5


def test_decode_receptive_field(codec, long_codes):
    """Changing frame 0 changes nothing past frame_length + decode_samples, and is still felt
    in the frame just before that bound (the windows really are that wide)."""
    bound = codec.frame_length + receptive_field(codec.config)["decode_samples"]
    changed = long_codes.clone()
    changed[:, :, 0] = (changed[:, :, 0] + 1) % codec.config.codebook_size
    diff = (codec.decode(changed, None) - codec.decode(long_codes, None)).abs()[0, 0]
    assert diff[bound:].max().item() == 0.0
    assert diff[bound - codec.frame_length:bound].max().item() > 0.0


def test_encode_receptive_field(codec, long_audio):
    """Perturbing sample 0 leaves the pre-VQ latent unchanged from frame encode_samples // 2048
    + 1 on, and changes the frame at that bound."""
    def latent(audio):
        state = {}
        z = codec.quantizer.downsample(codec.encoder(audio, state), state)
        return codec.quantizer.pre_module(z, state)

    bound = receptive_field(codec.config)["encode_samples"] // codec.frame_length
    changed = long_audio.clone()
    changed[..., 0] += 0.5
    diff = (latent(changed) - latent(long_audio)).abs().amax(dim=1)[0]
    assert diff[bound + 1:].max().item() == 0.0
    assert diff[bound].item() > 0.0


def test_real_receptive_field_numbers():
    rf = receptive_field(CodecConfig())
    # Dominated by the quantizer transformers: 8 layers x 127 positions at 21.5 Hz.
    assert rf == {"encode_samples": 3153194, "encode_frames": 1540,
                  "decode_samples": 2099498, "decode_frames": 1026}


# --- precision and file helpers ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_runs(ckpt_dir, codec, dtype):
    half = Codec.from_file(ckpt_dir, dtype=dtype)
    assert half.dtype == dtype
    codes = random_codes(codec, 12, seed=3)[0]  # [K, 12]
    wave, ref = half.decode(codes), codec.decode(codes)
    assert wave.dtype == torch.float32 and torch.isfinite(wave).all()
    rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731
    assert rms(wave - ref) < 0.1 * rms(ref)  # measured: bf16 ~0.02, fp16 ~0.003
    assert half.encode(ref[0, 0]).shape == (1, codec.num_codebooks, codes.shape[-1])


def snr_db(wave: torch.Tensor, ref: torch.Tensor) -> float:
    """Signal-to-noise ratio of ``wave`` against ``ref`` in dB."""
    noise = (wave.double() - ref.double()).pow(2).sum().item()
    return 10 * math.log10(ref.double().pow(2).sum().item() / max(noise, 1e-300))


@pytest.fixture(scope="module")
def fast(ckpt_dir) -> Codec:
    """The codec as a GPU loads it by default: fp32 encode, fast-precision decode."""
    return Codec.from_file(ckpt_dir, decode_dtype=CODEC_FAST_DECODE)


def test_default_precisions_by_device():
    assert codec_dtypes_for(torch.device("cpu")) == (torch.float32, torch.float32)
    assert codec_dtypes_for(torch.device("cuda")) == (torch.float32, CODEC_FAST_DECODE)
    assert chunk_frames_for("cpu") == DEFAULT_CHUNK_FRAMES
    assert chunk_frames_for(torch.device("cuda")) == GPU_CHUNK_FRAMES


def test_fast_decode_within_tolerance_of_fp32(fast, codec, gold, long_codes):
    """The stated tolerance that makes the fast precision the GPU default: its waveform within
    CODEC_FAST_SNR_DB of fp32 (measured 52 dB in fp16 on the fixture, bf16 only 35 dB)."""
    assert (fast.decode_dtype, fast.encode_dtype) == (CODEC_FAST_DECODE, torch.float32)
    assert next(fast.decoder.parameters()).dtype == CODEC_FAST_DECODE
    assert next(fast.quantizer.post_module.parameters()).dtype == CODEC_FAST_DECODE
    wave = fast.decode(gold["codes"])
    assert wave.dtype == torch.float32 and wave.shape == (1, 1, gold["decode"].numel())
    assert snr_db(wave[0, 0], gold["decode"]) >= CODEC_FAST_SNR_DB
    ref = codec.decode(long_codes, chunk_frames=None)
    assert snr_db(fast.decode(long_codes, chunk_frames=None), ref) >= CODEC_FAST_SNR_DB


def test_fast_codec_encodes_the_golden_codes_exactly(fast, gold):
    """Encode stays fp32 beside a fast decode: a voice's codes do not depend on the device."""
    assert torch.equal(fast.encode(gold["wave"])[0], gold["codes"])
    assert torch.equal(fast.encode(gold["wave"], chunk_frames=3)[0], gold["codes"])


@pytest.mark.parametrize("dtype,tolerance_db", [(CODEC_FAST_DECODE, CODEC_FAST_SNR_DB),
                                                (torch.bfloat16, 30.0)])
def test_reduced_precision_streamed_equals_whole(ckpt_dir, codec, long_codes, dtype,
                                                 tolerance_db):
    """Streamed = whole in every precision, within that precision's tolerance (rounding differs
    with the chunk's length; fp32 holds to 1e-5 above)."""
    half = Codec.from_file(ckpt_dir, decode_dtype=dtype)
    whole = half.decode(long_codes, chunk_frames=None)
    for chunk in (1, 5):
        assert snr_db(half.decode(long_codes, chunk_frames=chunk), whole) >= tolerance_db
    state, pieces, start = {}, [], 0
    for size in (1, 4, 2, 9, 3):
        pieces.append(half.decode_chunk(long_codes[..., start:start + size], state))
        start += size
    got = torch.cat(pieces, dim=-1)
    assert snr_db(got, whole[..., : got.shape[-1]]) >= tolerance_db
    ref = codec.decode(long_codes[..., :start], chunk_frames=None)
    assert snr_db(got, ref) >= tolerance_db


def _compiler_available() -> bool:
    import shutil

    return shutil.which("cc") is not None or shutil.which("gcc") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _compiler_available(), reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_activations_match_eager(ckpt_dir, gold, long_codes, codec):
    """``compile_activations``: the goldens still hold, chunks of other lengths reuse the
    kernel (no recompile), and the fast precision keeps its tolerance."""
    torch._dynamo.reset()
    compiled = Codec.from_file(ckpt_dir).compile_activations()
    torch.testing.assert_close(compiled.decode(gold["codes"])[0, 0], gold["decode"], atol=1e-4,
                               rtol=0)
    assert torch.equal(compiled.encode(gold["wave"])[0], gold["codes"])
    with torch._dynamo.config.patch(error_on_recompile=True):
        chunked = compiled.decode(long_codes, chunk_frames=5)
        whole = compiled.decode(long_codes, chunk_frames=None)
    assert (chunked - whole).abs().max().item() <= 1e-5
    assert (whole - codec.decode(long_codes, chunk_frames=None)).abs().max().item() <= 1e-4
    fast = Codec.from_file(ckpt_dir, decode_dtype=CODEC_FAST_DECODE).compile_activations()
    assert snr_db(fast.decode(long_codes, chunk_frames=5), whole) >= CODEC_FAST_SNR_DB


def test_set_precision_names_a_bad_dtype(ckpt_dir):
    codec = Codec.from_file(ckpt_dir)
    with pytest.raises(ValueError, match="codec precision must be a float dtype"):
        codec.set_precision(decode=torch.int8)
    assert codec.decode_dtype == torch.float32  # nothing cast


def test_encode_file_and_decode_to_file(codec, gold, tmp_path):
    src = tmp_path / "in.wav"
    sf.write(src, gold["wave"].numpy(), codec.sample_rate, subtype="FLOAT")  # exact, unclipped
    codes = encode_file(codec, src)
    assert torch.equal(codes, gold["codes"])
    out = decode_to_file(codec, codes, tmp_path / "out" / "decoded.flac")
    back = load_audio(out)
    assert back.numel() == codes.shape[-1] * codec.frame_length
    torch.testing.assert_close(back, gold["decode"], atol=2 / 32768, rtol=0)


# --- cudnn.benchmark around the codec's calls on CUDA ----------------------------------------


def test_cudnn_benchmark_only_for_recurring_cuda_lengths(monkeypatch):
    """The stream's chunk lengths and the automatic chunks on CUDA; not a ragged length, not
    the CPU, not where the caller asked for reproducible algorithms."""
    assert {FIRST_FRAMES, CHUNK_FRAMES, GPU_CHUNK_FRAMES} <= BENCHMARKED_FRAMES
    ragged = next(n for n in range(1, 1000) if n not in BENCHMARKED_FRAMES)
    assert cudnn_benchmark_pays(torch.device("cuda"), FIRST_FRAMES)
    assert cudnn_benchmark_pays("cuda:0", GPU_CHUNK_FRAMES)
    assert not cudnn_benchmark_pays("cuda", ragged)
    assert not cudnn_benchmark_pays("cpu", FIRST_FRAMES)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    assert not cudnn_benchmark_pays("cuda", FIRST_FRAMES)


def test_convolution_flags_set_benchmark_for_the_call_only(monkeypatch):
    cudnn = torch.backends.cudnn
    monkeypatch.setattr(cudnn, "benchmark", False)
    with convolution_flags("cuda", FIRST_FRAMES):
        assert cudnn.benchmark
    assert cudnn.benchmark is False
    with convolution_flags("cpu", FIRST_FRAMES):
        assert cudnn.benchmark is False
    monkeypatch.setattr(cudnn, "benchmark", True)  # the user's own setting stays
    with convolution_flags("cuda", FIRST_FRAMES):
        assert cudnn.benchmark
    assert cudnn.benchmark is True
    monkeypatch.setattr(cudnn, "benchmark", False)
    with pytest.raises(ValueError):  # restored on an error too
        with convolution_flags("cuda", FIRST_FRAMES):
            raise ValueError
    assert cudnn.benchmark is False
    frozen = torch.backends.flags_frozen.__globals__  # as torch.backends.disable_global_flags()
    with monkeypatch.context() as patch:
        patch.setitem(frozen, "__allow_nonbracketed_mutation_flag", False)
        assert torch.backends.flags_frozen()
        with convolution_flags("cuda", FIRST_FRAMES):
            assert cudnn.benchmark is False


@pytest.mark.parametrize("user_setting", [False, True])
def test_cpu_codec_leaves_global_flags_alone(codec, long_codes, monkeypatch, user_setting):
    """On the CPU the context is a no-op: the flag is the caller's during and after a call."""
    cudnn = torch.backends.cudnn
    monkeypatch.setattr(cudnn, "benchmark", user_setting)
    seen = []
    hook = codec.decoder.model[0].register_forward_hook(
        lambda *_: seen.append(cudnn.benchmark))
    try:
        codec.decode(long_codes[..., :FIRST_FRAMES], chunk_frames=None)
        codec.decode_chunk(long_codes[..., :FIRST_FRAMES], {})
    finally:
        hook.remove()
    assert seen == [user_setting, user_setting]
    assert cudnn.benchmark is user_setting
    assert torch.equal(codec.encode(torch.zeros(codec.frame_length * FIRST_FRAMES)),
                       codec.encode(torch.zeros(codec.frame_length * FIRST_FRAMES)))
    assert cudnn.benchmark is user_setting


def test_a_codec_loaded_and_run_under_inference_mode(codec, ckpt_dir):
    """ComfyUI loads and runs models under ``torch.inference_mode`` (its tensors have no version
    counter): a codec loaded there decodes a stream exactly as one loaded outside it, and
    encodes the same codes."""
    codes = random_codes(codec, 2 * FIRST_FRAMES, seed=3)
    want, state = [], {}
    with torch.no_grad():
        for start in (0, FIRST_FRAMES):
            want.append(codec.decode_chunk(codes[..., start:start + FIRST_FRAMES], state))
        audio = torch.cat(want, dim=-1)
        want_codes = codec.encode(audio)
    with torch.inference_mode():
        inference = Codec.from_file(ckpt_dir)
        got, state = [], {}
        for start in (0, FIRST_FRAMES):
            got.append(inference.decode_chunk(codes[..., start:start + FIRST_FRAMES], state))
        assert torch.equal(torch.cat(got, dim=-1), audio)
        assert torch.equal(inference.encode(audio), want_codes)
