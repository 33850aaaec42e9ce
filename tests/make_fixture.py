"""Write a second fixture set, other sizes than ``tests/fixtures``, in the same layout.

    python tests/make_fixture.py OUT_DIR      # -> OUT_DIR/tiny-s2/, OUT_DIR/real-s2-*.json

The checkpoint is random, deterministic, and in the real S2-Pro file layout: ``config.json``,
two safetensors shards with HF names + ``model.safetensors.index.json``, the tokenizer files
(the shipped tokenizer with its semantic tokens rewritten for the new codebook size),
``codec.pth`` (a plain torch-pickled state dict with both weight-norm key styles) and
``codec_config.json``. Every size differs from the shipped set: dims, head and layer counts
(GQA kept, ``n_head * head_dim != dim`` kept), codebook count and sizes, sample rate and frame
length. Parity tests skip on it (no goldens); every other test must pass on it:

    SAILFISH_FIXTURES=OUT_DIR python -m pytest tests -q

Only torch, safetensors and json are used (nothing from fish_core), so the set checks the
loaders rather than echoing them.
"""

import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

SHIPPED = Path(__file__).resolve().parent / "fixtures" / "tiny-s2"
SEED = 1234

# ---------------------------------------------------------------------------------- sizes
NUM_CODEBOOKS = 6  # 1 semantic + 5 residual (shipped: 10)
CODEBOOK_SIZE = 40  # LLM codebook = codec semantic codebook (shipped: 64)
RESIDUAL_CODEBOOK_SIZE = 24  # smaller than the semantic one, as in the real codec
FIRST_SEMANTIC_ID = 635  # after the 600 base tokens, 26 Qwen3 and 9 Fish added tokens
VOCAB_SIZE = 680  # a few unused padding rows after the semantic tokens, as in the real model

TEXT = dict(dim=48, n_layer=3, n_head=6, n_local_heads=3, head_dim=12, intermediate_size=96)
FAST = dict(dim=48, n_layer=1, n_head=4, n_local_heads=2, head_dim=16, intermediate_size=80)

SAMPLE_RATE = 24000
ENCODER_DIM = 4  # 4 -> 8 -> 16 -> 32 -> 64 channels; the transformer stage has dim 64 (1 head)
ENCODER_RATES = (2, 4, 4, 8)
ENCODER_TRANSFORMER_LAYERS = (0, 0, 0, 2)
DECODER_DIM = 64
DECODER_RATES = (8, 4, 4, 2)
LATENT_DIM = 64
DOWNSAMPLE = (2, 2)  # frame length 2 * 4 * 4 * 8 * 2 * 2 = 1024 samples (shipped: 2048)
CODEBOOK_DIM = 4
# Quantizer transformers: 2 heads of 64 on a 64-channel latent. head_dim stays 64 (the real one):
# shapes only give n_head * head_dim, so a codec loaded without its json assumes 64.
QUANTIZER = dict(n_layer=1, n_head=2, head_dim=64, intermediate_size=160, window=4)
ENCODER_WINDOW = 16


# ---------------------------------------------------------------------------------- LLM
def model_config() -> dict:
    shipped = json.loads((SHIPPED / "config.json").read_text(encoding="utf-8"))
    config = dict(shipped, semantic_start_token_id=FIRST_SEMANTIC_ID,
                  semantic_end_token_id=FIRST_SEMANTIC_ID + CODEBOOK_SIZE - 1)
    config["text_config"] = dict(shipped["text_config"], vocab_size=VOCAB_SIZE, max_seq_len=2048,
                                 audio_hidden_dim=2 * TEXT["dim"], **TEXT)
    config["audio_decoder_config"] = dict(shipped["audio_decoder_config"], text_dim=TEXT["dim"],
                                          vocab_size=CODEBOOK_SIZE, num_codebooks=NUM_CODEBOOKS,
                                          max_seq_len=NUM_CODEBOOKS + 1, **FAST)
    return config


def block_tensors(prefix: str, c: dict, qk_norm: bool, init) -> dict:
    """One transformer block: HF names, shapes [out, in]."""
    dim, hd, ffn = c["dim"], c["head_dim"], c["intermediate_size"]
    out = {
        f"{prefix}.attention.wqkv.weight": init((c["n_head"] + 2 * c["n_local_heads"]) * hd, dim),
        f"{prefix}.attention.wo.weight": init(dim, c["n_head"] * hd),
        f"{prefix}.attention_norm.weight": init.norm(dim),
        f"{prefix}.feed_forward.w1.weight": init(ffn, dim),
        f"{prefix}.feed_forward.w3.weight": init(ffn, dim),
        f"{prefix}.feed_forward.w2.weight": init(dim, ffn),
        f"{prefix}.ffn_norm.weight": init.norm(dim),
    }
    if qk_norm:
        out[f"{prefix}.attention.q_norm.weight"] = init.norm(hd)
        out[f"{prefix}.attention.k_norm.weight"] = init.norm(hd)
    return out


class Init:
    """Seeded random tensors: matrices N(0, std), norm weights 1 + N(0, 0.05)."""

    def __init__(self, seed: int, std: float, dtype: torch.dtype):
        self.generator = torch.Generator().manual_seed(seed)
        self.std, self.dtype = std, dtype

    def __call__(self, *shape: int) -> torch.Tensor:
        return (torch.randn(shape, generator=self.generator) * self.std).to(self.dtype)

    def norm(self, dim: int) -> torch.Tensor:
        return (1 + 0.05 * torch.randn(dim, generator=self.generator)).to(self.dtype)


def model_shards(config: dict) -> tuple[dict, dict]:
    """(shard 1: embeddings + slow layer 0, shard 2: the rest), HF names, bf16."""
    text, fast = config["text_config"], config["audio_decoder_config"]
    init = Init(SEED, text["initializer_range"], torch.bfloat16)
    first = {"text_model.model.embeddings.weight": init(VOCAB_SIZE, TEXT["dim"])}
    first.update(block_tensors("text_model.model.layers.0", TEXT, text["attention_qk_norm"], init))
    rest = {}
    for i in range(1, TEXT["n_layer"]):
        rest.update(block_tensors(f"text_model.model.layers.{i}", TEXT, text["attention_qk_norm"],
                                  init))
    rest["text_model.model.norm.weight"] = init.norm(TEXT["dim"])
    rest["audio_decoder.codebook_embeddings.weight"] = init(NUM_CODEBOOKS * CODEBOOK_SIZE,
                                                            TEXT["dim"])
    rest["audio_decoder.embeddings.weight"] = init(CODEBOOK_SIZE, FAST["dim"])
    for i in range(FAST["n_layer"]):
        rest.update(block_tensors(f"audio_decoder.layers.{i}", FAST, fast["attention_qk_norm"],
                                  init))
    rest["audio_decoder.norm.weight"] = init.norm(FAST["dim"])
    rest["audio_decoder.output.weight"] = init(CODEBOOK_SIZE, FAST["dim"])
    return first, rest


def write_model(out: Path, config: dict) -> None:
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    weight_map, total = {}, 0
    for name, tensors in zip(names, model_shards(config)):
        save_file(tensors, str(out / name), metadata={"format": "pt"})
        weight_map.update({key: name for key in tensors})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(out / "model.safetensors.index.json", index)
    write_json(out / "config.json", config)


# ---------------------------------------------------------------------------------- tokenizer
def is_semantic(content: str) -> bool:
    return content.startswith("<|semantic:")


def semantic_token(i: int, template: dict) -> dict:
    return dict(template, content=f"<|semantic:{i}|>")


def write_tokenizer(out: Path) -> None:
    """The shipped tokenizer with ``<|semantic:0..C-1|>`` at ``FIRST_SEMANTIC_ID``.. (ids of the
    other added tokens unchanged; they all lie below the semantic range)."""
    tokenizer = json.loads((SHIPPED / "tokenizer.json").read_text(encoding="utf-8"))
    kept = [t for t in tokenizer["added_tokens"] if not is_semantic(t["content"])]
    template = next(t for t in tokenizer["added_tokens"] if is_semantic(t["content"]))
    assert max(t["id"] for t in kept) < FIRST_SEMANTIC_ID, "added tokens overlap the semantic ids"
    semantic = [dict(semantic_token(i, template), id=FIRST_SEMANTIC_ID + i)
                for i in range(CODEBOOK_SIZE)]
    tokenizer["added_tokens"] = kept + semantic
    write_json(out / "tokenizer.json", tokenizer)

    tok_config = json.loads((SHIPPED / "tokenizer_config.json").read_text(encoding="utf-8"))
    decoder = tok_config["added_tokens_decoder"]
    kept = {k: v for k, v in decoder.items() if not is_semantic(v["content"])}
    template = next(v for v in decoder.values() if is_semantic(v["content"]))
    kept.update({str(FIRST_SEMANTIC_ID + i): semantic_token(i, template)
                 for i in range(CODEBOOK_SIZE)})
    tok_config["added_tokens_decoder"] = kept
    write_json(out / "tokenizer_config.json", tok_config)
    special = "special_tokens_map.json"
    (out / special).write_bytes((SHIPPED / special).read_bytes())


# ---------------------------------------------------------------------------------- codec
class CodecWeights:
    """Builds the codec's checkpoint state dict, key by key, in the real key styles."""

    def __init__(self, seed: int):
        self.init = Init(seed, 1.0, torch.float32)
        self.state = {}

    def tensor(self, key: str, *shape: int, scale: float = 1.0) -> None:
        self.state[key] = self.init(*shape) * scale

    def ones(self, key: str, *shape: int) -> None:
        self.state[key] = torch.ones(shape)

    def weight_normed(self, prefix: str, weight_shape: tuple, bias: int, legacy=False,
                      gain: float = 3 ** -0.5) -> None:
        """g, v and bias of a weight-normed conv; g = gain * ||v|| (per slice): weight = gain * v,
        with v ~ N(0, 1 / fan_in). The default gain gives torch's default conv init variance.
        ``legacy``: ``weight_g``/``weight_v`` (VQ projections), else ``parametrizations``."""
        fan_in = math.prod(weight_shape[1:])
        v = self.init(*weight_shape) / math.sqrt(fan_in)
        g = gain * v.flatten(1).norm(dim=1).view(-1, *(1,) * (len(weight_shape) - 1))
        g_key, v_key = (("weight_g", "weight_v") if legacy else
                        ("parametrizations.weight.original0", "parametrizations.weight.original1"))
        self.state[f"{prefix}.{g_key}"], self.state[f"{prefix}.{v_key}"] = g, v
        self.state[f"{prefix}.bias"] = torch.zeros(bias)

    def conv(self, prefix: str, c_out: int, c_in: int, kernel: int, gain: float = 3 ** -0.5
             ) -> None:
        self.weight_normed(f"{prefix}.conv", (c_out, c_in, kernel), c_out, gain=gain)

    def residual_unit(self, prefix: str, dim: int) -> None:
        self.ones(f"{prefix}.block.0.alpha", 1, dim, 1)
        self.conv(f"{prefix}.block.1", dim, dim, 7)
        self.ones(f"{prefix}.block.2.alpha", 1, dim, 1)
        self.conv(f"{prefix}.block.3", dim, dim, 1)

    def transformer(self, prefix: str, dim: int, n_layer: int, n_head: int, head_dim: int,
                    ffn: int) -> None:
        for i in range(n_layer):
            layer = f"{prefix}.layers.{i}"
            self.tensor(f"{layer}.attention.wqkv.weight", 3 * n_head * head_dim, dim,
                        scale=dim ** -0.5)
            self.tensor(f"{layer}.attention.wo.weight", dim, n_head * head_dim,
                        scale=(n_head * head_dim) ** -0.5)
            self.tensor(f"{layer}.feed_forward.w1.weight", ffn, dim, scale=dim ** -0.5)
            self.tensor(f"{layer}.feed_forward.w3.weight", ffn, dim, scale=dim ** -0.5)
            self.tensor(f"{layer}.feed_forward.w2.weight", dim, ffn, scale=ffn ** -0.5)
            self.ones(f"{layer}.ffn_norm.weight", dim)
            self.ones(f"{layer}.attention_norm.weight", dim)
            self.tensor(f"{layer}.attention_layer_scale.gamma", dim, scale=0.1)
            self.tensor(f"{layer}.ffn_layer_scale.gamma", dim, scale=0.1)
        self.ones(f"{prefix}.norm.weight", dim)

    def convnext(self, prefix: str, dim: int) -> None:
        self.tensor(f"{prefix}.gamma", dim, scale=0.1)
        self.tensor(f"{prefix}.dwconv.conv.weight", dim, 1, 7, scale=7 ** -0.5)
        self.state[f"{prefix}.dwconv.conv.bias"] = torch.zeros(dim)
        self.ones(f"{prefix}.norm.weight", dim)
        self.state[f"{prefix}.norm.bias"] = torch.zeros(dim)
        self.tensor(f"{prefix}.pwconv1.weight", 4 * dim, dim, scale=dim ** -0.5)
        self.state[f"{prefix}.pwconv1.bias"] = torch.zeros(4 * dim)
        self.tensor(f"{prefix}.pwconv2.weight", dim, 4 * dim, scale=(4 * dim) ** -0.5)
        self.state[f"{prefix}.pwconv2.bias"] = torch.zeros(dim)

    def vector_quantizer(self, prefix: str, size: int) -> None:
        self.weight_normed(f"{prefix}.in_proj", (CODEBOOK_DIM, LATENT_DIM, 1), CODEBOOK_DIM,
                           legacy=True)
        self.weight_normed(f"{prefix}.out_proj", (LATENT_DIM, CODEBOOK_DIM, 1), LATENT_DIM,
                           legacy=True)
        self.tensor(f"{prefix}.codebook.weight", size, CODEBOOK_DIM)


def encoder_weights(w: CodecWeights) -> None:
    dim = ENCODER_DIM
    w.conv("encoder.block.0", dim, 1, 7)
    for i, (rate, n_layer) in enumerate(zip(ENCODER_RATES, ENCODER_TRANSFORMER_LAYERS), start=1):
        block = f"encoder.block.{i}.block"
        for j in range(3):  # dilations 1, 3, 9
            w.residual_unit(f"{block}.{j}", dim)
        w.ones(f"{block}.3.alpha", 1, dim, 1)
        w.conv(f"{block}.4", 2 * dim, dim, 2 * rate)
        dim *= 2
        if n_layer:
            w.transformer(f"{block}.5", dim, n_layer, dim // 64, 64, 3 * dim)
    n = len(ENCODER_RATES)
    w.ones(f"encoder.block.{n + 1}.alpha", 1, dim, 1)
    w.conv(f"encoder.block.{n + 2}", LATENT_DIM, dim, 3)


def quantizer_weights(w: CodecWeights) -> None:
    w.vector_quantizer("quantizer.semantic_quantizer.quantizers.0", CODEBOOK_SIZE)
    for i in range(NUM_CODEBOOKS - 1):
        w.vector_quantizer(f"quantizer.quantizer.quantizers.{i}", RESIDUAL_CODEBOOK_SIZE)
    for direction, factors in (("downsample", DOWNSAMPLE), ("upsample", DOWNSAMPLE[::-1])):
        for i, factor in enumerate(factors):  # plain (not weight-normed) conv, then ConvNeXt
            w.tensor(f"quantizer.{direction}.{i}.0.conv.weight", LATENT_DIM, LATENT_DIM, factor,
                     scale=(LATENT_DIM * factor) ** -0.5)
            w.state[f"quantizer.{direction}.{i}.0.conv.bias"] = torch.zeros(LATENT_DIM)
            w.convnext(f"quantizer.{direction}.{i}.1", LATENT_DIM)
    q = QUANTIZER
    for module in ("pre_module", "post_module"):
        w.transformer(f"quantizer.{module}", LATENT_DIM, q["n_layer"], q["n_head"], q["head_dim"],
                      q["intermediate_size"])


def decoder_weights(w: CodecWeights) -> None:
    dim = DECODER_DIM
    w.conv("decoder.model.0", dim, LATENT_DIM, 7)
    for i, rate in enumerate(DECODER_RATES, start=1):
        block = f"decoder.model.{i}.block"
        w.ones(f"{block}.0.alpha", 1, dim, 1)
        # transposed conv: weight [C_in, C_out, k], so g is [C_in, 1, 1] and the bias [C_out]
        w.weight_normed(f"{block}.1.conv", (dim, dim // 2, 2 * rate), dim // 2)
        dim //= 2
        for j in range(3):
            w.residual_unit(f"{block}.{j + 2}", dim)
    n = len(DECODER_RATES)
    w.ones(f"decoder.model.{n + 1}.alpha", 1, dim, 1)
    w.conv(f"decoder.model.{n + 2}", 1, dim, 7, gain=4.0)  # output peaks near 0.2-0.5


def codec_config() -> dict:
    """Keys as in the shipped codec_config.json (they mirror the reference yaml)."""
    shipped = json.loads((SHIPPED / "codec_config.json").read_text(encoding="utf-8"))
    q = QUANTIZER
    transformer = dict(shipped["quantizer"]["pre_module"]["config"], n_layer=q["n_layer"],
                       n_head=q["n_head"], dim=LATENT_DIM, head_dim=q["head_dim"],
                       intermediate_size=q["intermediate_size"])
    quantizer = dict(shipped["quantizer"], input_dim=LATENT_DIM, n_codebooks=NUM_CODEBOOKS - 1,
                     codebook_size=RESIDUAL_CODEBOOK_SIZE, semantic_codebook_size=CODEBOOK_SIZE,
                     codebook_dim=CODEBOOK_DIM, downsample_factor=list(DOWNSAMPLE))
    quantizer["pre_module"] = dict(shipped["quantizer"]["pre_module"], window_size=q["window"],
                                   input_dim=LATENT_DIM, config=transformer)
    dim = ENCODER_DIM * 2 ** len(ENCODER_RATES)  # the last stage, where the transformer is
    encoder_transformer = dict(shipped["encoder_transformer"], dim=dim, n_head=dim // 64,
                               n_layer=ENCODER_TRANSFORMER_LAYERS[-1], intermediate_size=3 * dim,
                               window_size=ENCODER_WINDOW)
    general = dict(shipped["transformer_general_config"], window_size=ENCODER_WINDOW)
    frame_length = math.prod(ENCODER_RATES) * math.prod(DOWNSAMPLE)
    return {
        "_comment": ("Random codec for the alternate fixture set (tests/make_fixture.py); "
                     "no goldens."),
        "sample_rate": SAMPLE_RATE, "causal": True, "encoder_dim": ENCODER_DIM,
        "encoder_rates": list(ENCODER_RATES), "latent_dim": LATENT_DIM,
        "decoder_dim": DECODER_DIM, "decoder_rates": list(DECODER_RATES),
        "encoder_transformer_layers": list(ENCODER_TRANSFORMER_LAYERS),
        "decoder_transformer_layers": shipped["decoder_transformer_layers"],
        "transformer_general_config": general, "encoder_transformer": encoder_transformer,
        "quantizer": quantizer, "frame_length": frame_length,
        "hop_length_encoder": math.prod(ENCODER_RATES),
    }


def write_codec(out: Path) -> None:
    w = CodecWeights(SEED + 1)
    encoder_weights(w)
    quantizer_weights(w)
    decoder_weights(w)
    torch.save(w.state, out / "codec.pth")
    write_json(out / "codec_config.json", codec_config())


# ---------------------------------------------------------------------------------- hearing
# Qwen3-ForcedAligner / Qwen3-ASR checkpoints (``aligner/tiny-aligner``, ``aligner/tiny-asr``) in
# the real on-disk format with other sizes than the shipped ones: fewer mel bins, shorter chunks,
# other widths, heads and layer counts, another number of timestamp classes. The tokenizer files
# are the shipped ones (the special ids stay those of its vocabulary).
SHIPPED_ALIGNER = SHIPPED.parent / "aligner"
HEARING_AUDIO = dict(num_mel_bins=80, encoder_layers=1, encoder_attention_heads=2,
                     encoder_ffn_dim=40, d_model=32, output_dim=48, downsample_hidden_size=8,
                     n_window=25, n_window_infer=400, conv_chunksize=7)
HEARING_TEXT = dict(vocab_size=700, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                    num_attention_heads=6, num_key_value_heads=3, head_dim=8)
HEARING_MROPE = [2, 1, 1]  # sums to head_dim / 2
CLASSIFY_NUM = 3000


def hearing_config(name: str) -> dict:
    config = json.loads((SHIPPED_ALIGNER / name / "config.json").read_text(encoding="utf-8"))
    thinker = config["thinker_config"]
    thinker["audio_config"].update(HEARING_AUDIO)
    thinker["text_config"].update(HEARING_TEXT)
    thinker["text_config"]["rope_scaling"]["mrope_section"] = HEARING_MROPE
    if "classify_num" in thinker:
        thinker["classify_num"] = CLASSIFY_NUM
    return config


def hearing_tensors(config: dict, seed: int) -> dict:
    thinker = config["thinker_config"]
    a, t = thinker["audio_config"], thinker["text_config"]
    gen = torch.Generator().manual_seed(seed)
    shapes: dict[str, tuple] = {}
    width, d = a["downsample_hidden_size"], a["d_model"]
    bins = a["num_mel_bins"]
    for _ in range(3):
        bins = (bins + 1) // 2
    for i, cin in ((1, 1), (2, width), (3, width)):
        shapes[f"audio_tower.conv2d{i}.weight"] = (width, cin, 3, 3)
        shapes[f"audio_tower.conv2d{i}.bias"] = (width,)
    shapes["audio_tower.conv_out.weight"] = (d, width * bins)
    for i in range(a["encoder_layers"]):
        p = f"audio_tower.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[p + f"self_attn.{proj}.weight"] = (d, d)
            shapes[p + f"self_attn.{proj}.bias"] = (d,)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            shapes[p + f"{norm}.weight"] = shapes[p + f"{norm}.bias"] = (d,)
        ffn = a["encoder_ffn_dim"]
        shapes[p + "fc1.weight"], shapes[p + "fc1.bias"] = (ffn, d), (ffn,)
        shapes[p + "fc2.weight"], shapes[p + "fc2.bias"] = (d, a["encoder_ffn_dim"]), (d,)
    shapes["audio_tower.ln_post.weight"] = shapes["audio_tower.ln_post.bias"] = (d,)
    shapes["audio_tower.proj1.weight"], shapes["audio_tower.proj1.bias"] = (d, d), (d,)
    shapes["audio_tower.proj2.weight"] = (a["output_dim"], d)
    shapes["audio_tower.proj2.bias"] = (a["output_dim"],)
    h, dh = t["hidden_size"], t["head_dim"]
    shapes["model.embed_tokens.weight"] = (t["vocab_size"], h)
    for i in range(t["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (t["num_attention_heads"] * dh, h)
        shapes[p + "self_attn.k_proj.weight"] = (t["num_key_value_heads"] * dh, h)
        shapes[p + "self_attn.v_proj.weight"] = (t["num_key_value_heads"] * dh, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, t["num_attention_heads"] * dh)
        shapes[p + "self_attn.q_norm.weight"] = shapes[p + "self_attn.k_norm.weight"] = (dh,)
        shapes[p + "mlp.gate_proj.weight"] = (t["intermediate_size"], h)
        shapes[p + "mlp.up_proj.weight"] = (t["intermediate_size"], h)
        shapes[p + "mlp.down_proj.weight"] = (h, t["intermediate_size"])
        shapes[p + "input_layernorm.weight"] = shapes[p + "post_attention_layernorm.weight"] = (h,)
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (thinker.get("classify_num", t["vocab_size"]), h)
    tensors = {}
    for name, shape in shapes.items():
        x = torch.randn(shape, generator=gen)
        if name.endswith("bias"):
            x = x * 0.02
        elif len(shape) == 1:  # norms
            x = 1 + 0.1 * x
        elif "embed_tokens" not in name:
            x = x / math.sqrt(math.prod(shape[1:]))
        tensors["thinker." + name] = x.to(torch.bfloat16).contiguous()
    return tensors


def write_hearing(root: Path) -> None:
    """``root/aligner/tiny-aligner`` and ``root/aligner/tiny-asr`` (no inputs, no goldens), and
    the real checkpoints' manifest (it does not depend on the set)."""
    out = root / "aligner"
    out.mkdir(parents=True, exist_ok=True)
    (out / "real-manifest.json").write_bytes((SHIPPED_ALIGNER / "real-manifest.json").read_bytes())
    for seed, name in enumerate(("tiny-aligner", "tiny-asr")):
        folder = out / name
        folder.mkdir(exist_ok=True)
        config = hearing_config(name)
        write_json(folder / "config.json", config)
        for file in ("vocab.json", "merges.txt", "tokenizer_config.json", "chat_template.json"):
            (folder / file).write_bytes((SHIPPED_ALIGNER / name / file).read_bytes())
        pre = json.loads((SHIPPED_ALIGNER / name / "preprocessor_config.json").read_text())
        pre["feature_size"] = HEARING_AUDIO["num_mel_bins"]
        write_json(folder / "preprocessor_config.json", pre)
        save_file(hearing_tensors(config, SEED + 10 + seed), str(folder / "model.safetensors"),
                  metadata={"format": "pt"})


# ---------------------------------------------------------------------------------- main
def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def make_fixture(root: Path) -> Path:
    """Write ``root/tiny-s2/`` (and copy the real model's config and manifest, which do not
    depend on the set) and return it."""
    out = Path(root) / "tiny-s2"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("real-s2-config.json", "real-s2-manifest.json"):
        (out.parent / name).write_bytes((SHIPPED.parent / name).read_bytes())
    write_model(out, model_config())
    write_tokenizer(out)
    write_codec(out)
    write_hearing(out.parent)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/make_fixture.py OUT_DIR")
    print(make_fixture(Path(sys.argv[1])))
