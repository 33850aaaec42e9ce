"""A random-weight S2-Pro stand-in in the real file layout, at the real size (or the medium perf
size), for the CPU/GPU benchmarks. Never commit what it writes (the real one is ~10.7 GB).

    python bench/make_standin.py ../realsize/s2-standin                 # real config, ~9.1 GB LLM
    python bench/make_standin.py ../realsize/medium --config medium    # the medium perf config

What it writes (the layout of ``fishaudio/s2-pro``):

- ``config.json``: ``tests/fixtures/real-s2-config.json`` (``medium``: its dims shrunk as in
  ``bench_decode.SIZES``, the real vocabulary and token ids kept).
- ``model-00001-of-00002.safetensors``, ``model-00002-of-00002.safetensors`` and
  ``model.safetensors.index.json``: bf16 tensors with HF names (every key and shape of
  ``tests/fixtures/real-s2-manifest.json`` for the real config), matrices N(0,
  ``initializer_range``), norm weights 1. The first shard is filled up to 5 GB (Hugging Face's
  default shard size), the second takes the rest (``medium``: two halves). Each file is written
  tensor by tensor (header first), so the writer holds one tensor in memory, not a shard.
- The row of ``<|im_end|>`` in the tied token embedding (= the output head) multiplied by
  ``--eos-scale`` (default 0): its logit is 0 while the top-k semantic logits are well above, so
  generation never stops early and runs to the frame limit, as a benchmark needs.
- ``tokenizer.json`` (+ ``tokenizer_config.json``, ``special_tokens_map.json``): the fixture's
  byte-level BPE padded with unused entries so that every added token has its real id
  (``<|im_end|>`` 151645, ``<|semantic:0..4095|>`` 151678..155773); text encodes to more tokens
  than with the real tokenizer, which a benchmark does not mind.
- ``codec.pth``: the real codec's 535 tensors (``real-s2-manifest.json``, both weight-norm key
  styles) in fp32, random with torch's default init variance, weight-norm gains from ``v``.
- ``standin.json``: what was made, bytes, seconds.

Measured (2-core EPYC, shared): see bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_decode import make_config  # noqa: E402
from fish_core.engine.config import ModelConfig  # noqa: E402
from fish_core.loading.checkpoint import build_meta  # noqa: E402
from fish_core.loading.shards import INDEX_FILE  # noqa: E402
from fish_core.loading.tensor_names import to_hf  # noqa: E402

FIXTURES = ROOT / "tests/fixtures"
REAL_CONFIG = FIXTURES / "real-s2-config.json"
MANIFEST = FIXTURES / "real-s2-manifest.json"
TINY = FIXTURES / "tiny-s2"
SHARD_NAMES = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
FIRST_SHARD_BYTES = 5 * 10**9  # Hugging Face's default max_shard_size
ROWS_PER_CHUNK = 4096  # rows drawn at a time (fp32 temporaries of ~40 MB at D = 2560)
TINY_FIRST_ADDED = 600  # the fixture tokenizer's first added token (<|endoftext|>)
SEMANTIC_TINY_FIRST = 635  # the fixture tokenizer's <|semantic:0|>
REAL_FIRST_ADDED = 151643  # the same token in the real Qwen3 vocabulary


# ---------------------------------------------------------------------------------- config
def standin_config(name: str) -> dict:
    """config.json of the stand-in: the real one, or the medium dims with the real ids."""
    real = json.loads(REAL_CONFIG.read_text(encoding="utf-8"))
    if name == "real":
        return real
    data = make_config(name).to_dict()
    if data["text_config"]["vocab_size"] == real["text_config"]["vocab_size"]:
        for key in ("eos_token_id", "pad_token_id", "audio_pad_token_id",
                    "semantic_start_token_id", "semantic_end_token_id"):
            data[key] = real[key]
    ModelConfig.from_dict(data)  # checked like a real one
    return data


def llm_tensors(config: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(HF name, shape) of every LLM tensor, sorted by name (as HF writes them)."""
    meta = build_meta(config)
    return sorted((to_hf(n), tuple(p.shape)) for n, p in meta.named_parameters())


def check_manifest(tensors) -> None:
    """The real config must give exactly the real checkpoint's keys and shapes."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))["llm"]["tensors"]
    want = {t["key"]: tuple(t["shape"]) for t in manifest}
    if dict(tensors) != want:
        raise SystemExit("the real config does not give the keys/shapes of real-s2-manifest.json")


# ---------------------------------------------------------------------------------- writing
def split_shards(tensors, first_bytes: int):
    """Two lists of (name, shape): in order, the first up to ``first_bytes`` of bf16, the rest."""
    first, rest, size = [], [], 0
    for name, shape in tensors:
        size += math.prod(shape) * 2
        (first if size <= first_bytes and not rest else rest).append((name, shape))
    return first, rest


def write_safetensors(path: Path, tensors, make) -> int:
    """Write ``tensors`` [(name, shape)] as bf16, ``make(name, shape)`` producing each in turn;
    the header is written first, from the shapes, so one tensor is in memory at a time."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        nbytes = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape in tensors:
            t = make(name, shape).to(torch.bfloat16).contiguous()
            if tuple(t.shape) != tuple(shape):
                raise RuntimeError(f"{name}: made {tuple(t.shape)}, expected {shape}")
            f.write(t.view(torch.uint8).numpy().data)
    return offset


class Weights:
    """Seeded random tensors, each from its own generator (seed, index), so any order gives the
    same file for a given generating ``device`` (a GPU draws them faster)."""

    def __init__(self, config: dict, seed: int, eos_scale: float, device="cpu"):
        self.std = config["text_config"]["initializer_range"]
        self.eos_id, self.eos_scale, self.seed = config["eos_token_id"], eos_scale, seed
        self.device = torch.device(device)
        self.count = 0

    def __call__(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        self.count += 1
        if len(shape) == 1:  # norm weights
            return torch.ones(shape, dtype=torch.bfloat16)
        gen = torch.Generator(self.device).manual_seed(self.seed * 100003 + self.count)
        out = torch.empty(shape, dtype=torch.bfloat16)
        for i in range(0, shape[0], ROWS_PER_CHUNK):
            rows = min(ROWS_PER_CHUNK, shape[0] - i)
            block = torch.randn((rows, *shape[1:]), generator=gen, device=self.device)
            out[i: i + rows] = (block * self.std).to("cpu", torch.bfloat16)
        if name == "text_model.model.embeddings.weight":
            out[self.eos_id] *= self.eos_scale  # the tied head's end-of-speech row
        return out


def write_llm(out: Path, config: dict, seed: int, eos_scale: float, device="cpu") -> dict:
    tensors = llm_tensors(ModelConfig.from_dict(config))
    if config == json.loads(REAL_CONFIG.read_text(encoding="utf-8")):
        check_manifest(tensors)
    total = sum(math.prod(s) * 2 for _, s in tensors)
    first_bytes = FIRST_SHARD_BYTES if total > 2 * FIRST_SHARD_BYTES * 0.9 else total // 2
    shards = split_shards(tensors, min(first_bytes, total))
    make = Weights(config, seed, eos_scale, device)
    weight_map = {}
    for name, part in zip(SHARD_NAMES, shards):
        write_safetensors(out / name, part, make)
        weight_map.update({key: name for key, _ in part})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_json(out / INDEX_FILE, index)
    write_json(out / "config.json", config)
    return {"llm_tensors": len(tensors), "llm_params": total // 2, "llm_bytes": total}


# ---------------------------------------------------------------------------------- tokenizer
def real_id(tiny_id: int) -> int:
    return tiny_id - TINY_FIRST_ADDED + REAL_FIRST_ADDED


def write_tokenizer(out: Path, config: dict) -> None:
    """The fixture tokenizer with the real ids: unused vocabulary entries up to the first added
    token, the Qwen3 and Fish added tokens at their real ids, ``<|semantic:i|>`` for every code."""
    semantic = config["semantic_end_token_id"] - config["semantic_start_token_id"] + 1
    tok = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    for i in range(len(vocab), REAL_FIRST_ADDED):
        vocab[f"<|unused_{i}|>"] = i  # unreachable: no merge makes them
    is_semantic = lambda t: t["content"].startswith("<|semantic:")  # noqa: E731
    template = next(t for t in tok["added_tokens"] if is_semantic(t))
    added = [dict(t, id=real_id(t["id"])) for t in tok["added_tokens"] if not is_semantic(t)]
    added += [dict(template, content=f"<|semantic:{i}|>", id=config["semantic_start_token_id"] + i)
              for i in range(semantic)]
    tok["added_tokens"] = added
    write_json(out / "tokenizer.json", tok)

    tok_config = json.loads((TINY / "tokenizer_config.json").read_text(encoding="utf-8"))
    decoder = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added}
    tok_config["added_tokens_decoder"] = decoder
    write_json(out / "tokenizer_config.json", tok_config)
    (out / "special_tokens_map.json").write_bytes((TINY / "special_tokens_map.json").read_bytes())


# ---------------------------------------------------------------------------------- codec
def codec_state(seed: int) -> dict[str, torch.Tensor]:
    """The real codec's keys and shapes (both weight-norm styles), fp32 random weights."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))["codec"]["tensors"]
    shapes = {t["key"]: tuple(t["shape"]) for t in manifest}
    gen = torch.Generator().manual_seed(seed + 1)
    state = {}
    gains = {"parametrizations.weight.original0": "parametrizations.weight.original1",
             "weight_g": "weight_v"}
    for key, shape in shapes.items():
        leaf = key.rsplit(".", 1)[-1]
        if key.endswith(tuple(gains)):
            continue  # from its v, below
        if leaf in ("alpha",) or key.endswith("norm.weight"):
            state[key] = torch.ones(shape)
        elif leaf == "bias":
            state[key] = torch.zeros(shape)
        elif leaf == "gamma":
            state[key] = torch.randn(shape, generator=gen) * 0.1
        elif leaf == "weight" and key.endswith("codebook.weight"):
            state[key] = torch.randn(shape, generator=gen)
        else:  # a plain weight or a weight-norm v: torch's default variance 1 / (3 fan_in)
            fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
            state[key] = torch.randn(shape, generator=gen) / math.sqrt(3 * fan_in)
    for key, shape in shapes.items():
        for g_leaf, v_leaf in gains.items():
            if key.endswith(g_leaf):
                v = state[key[: -len(g_leaf)] + v_leaf]
                state[key] = v.flatten(1).norm(dim=1).reshape(shape)  # weight = v at init
    return {k: state[k] for k in shapes}


def write_codec(out: Path, seed: int) -> dict:
    state = codec_state(seed)
    torch.save(state, out / "codec.pth")
    return {"codec_tensors": len(state), "codec_params": sum(t.numel() for t in state.values())}


# ---------------------------------------------------------------------------------- main
def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def make_standin(out: Path, config_name: str = "real", seed: int = 0, eos_scale: float = 0.0,
                 codec: bool = True, device="cpu") -> dict:
    """Write the stand-in into ``out`` (``device`` draws the random weights); the tokenizer
    only where the vocabulary is the real one (``tiny``: the LLM and the codec only)."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    config = standin_config(config_name)
    info = {"config": config_name, "seed": seed, "eos_scale": eos_scale}
    info.update(write_llm(out, config, seed, eos_scale, device))
    info["llm_write_s"] = round(time.perf_counter() - t0, 1)
    if config["semantic_start_token_id"] == real_id(SEMANTIC_TINY_FIRST):
        write_tokenizer(out, config)
    if codec:
        t1 = time.perf_counter()
        info.update(write_codec(out, seed))
        info["codec_write_s"] = round(time.perf_counter() - t1, 1)
    info["total_s"] = round(time.perf_counter() - t0, 1)
    info["disk_bytes"] = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    write_json(out / "standin.json", info)
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the folder to write (outside the repository)")
    ap.add_argument("--config", choices=["real", "medium", "tiny"], default="real",
                    help="tiny: no tokenizer (its vocabulary is not the real one's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eos-scale", type=float, default=0.0,
                    help="factor on the <|im_end|> row of the tied head (0: never stops early)")
    ap.add_argument("--no-codec", action="store_true", help="skip codec.pth (1.6 GB)")
    args = ap.parse_args(argv)
    if (args.out.resolve() / ".git").exists() or ROOT in args.out.resolve().parents:
        raise SystemExit(f"{args.out}: write stand-in weights outside the repository")
    info = make_standin(args.out, args.config, args.seed, args.eos_scale, not args.no_codec)
    print(json.dumps(info, indent=2))
    return info


if __name__ == "__main__":
    main()
