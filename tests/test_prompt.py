"""Prompt encoding parity: every golden prompt, part by part and as the final [11, T] tensor."""

import pytest
import torch

from conftest import read_sizes
from fish_core.engine.config import ModelConfig
from fish_core.text.prompt import (PromptEncoder, PromptError, Reference, conversation,
                              system_message)
from fish_core.text.tokenizer import FishTokenizer, TokenizerError


@pytest.fixture(scope="module")
def tokenizer(ckpt_dir):
    return FishTokenizer.from_dir(ckpt_dir)


@pytest.fixture(scope="module")
def encoder(ckpt_dir, tokenizer):
    config = ModelConfig.from_file(ckpt_dir)
    return PromptEncoder(tokenizer, config.num_codebooks, config.codebook_size)


def scenarios(golden):
    return [name for name, value in golden.json("prompts").items()
            if isinstance(value, dict) and "batches" in value]


def references_of(golden, name):
    kwargs = golden.json("prompts")[name]["generate_long_kwargs"]
    tensors = golden.tensors("prompts")
    texts = kwargs.get("prompt_text") or []
    codes = [tensors[label.split()[0]] for label in kwargs.get("prompt_tokens") or []]
    return [Reference(t, c) for t, c in zip(texts, codes)]


def test_special_ids_come_from_the_tokenizer(tokenizer, ckpt_dir):
    config = ModelConfig.from_file(ckpt_dir)
    tokenizer.check_config(config)
    assert tokenizer.im_end_id == config.eos_token_id
    assert tokenizer.semantic_begin_id == config.semantic_start_token_id
    assert tokenizer.num_semantic_tokens == config.codebook_size


def test_semantic_ids_are_the_reference_ones(tokenizer, golden):
    assert golden.json("summary")["config_semantic_ids_from_tokenizer"] == [
        tokenizer.semantic_begin_id, tokenizer.semantic_end_id]


def test_every_part_tokenizes_like_the_reference(tokenizer, golden):
    checked = 0
    for name in scenarios(golden):
        for batch in golden.json("prompts")[name]["batches"]:
            for part in batch["parts"]:
                if part["type"] == "text":
                    assert tokenizer.encode(part["text"]) == part["ids"], (name, part["text"])
                    checked += 1
    assert checked > 0


def test_every_golden_prompt_is_rebuilt_exactly(encoder, golden):
    """All scenarios and every batch of multi-batch ones: system (+ references), the history of
    earlier batches with the codes the reference kept, the user turn, the open voice turn."""
    prompts, generation = golden.tensors("prompts"), golden.tensors("generation")
    checked = 0
    for name in scenarios(golden):
        refs = references_of(golden, name)
        history = []
        for i, batch in enumerate(golden.json("prompts")[name]["batches"]):
            messages = conversation(batch["batch_text"], refs, history)
            got = encoder.encode(messages)
            want = prompts[f"{name}.batch{i}.prompt"]
            assert got.dtype == torch.long and got.shape == want.shape, (name, i)
            assert torch.equal(got, want), (name, i)
            assert got[0].tolist() == batch["token_ids"]
            # parts line up with the reference's part list (text and VQ alike)
            parts = encoder.parts(messages)
            assert len(parts) == len(batch["parts"])
            for mine, ref in zip(parts, batch["parts"]):
                if ref["type"] == "text":
                    assert mine == ref["text"]
                else:
                    assert list(mine.shape) == ref["shape"]
            history.append((batch["batch_text"], generation[f"{name}.batch{i}.codes"]))
            checked += 1
    assert checked >= len(scenarios(golden))


def test_reference_speaker_tags(encoder):
    codes = torch.zeros(encoder.num_codebooks, 3, dtype=torch.long)
    msg = system_message([Reference("hello", codes), Reference("<|speaker:7|>bye", codes)])
    assert msg.parts[1] == "<|speaker:0|>hello\n<|speaker:7|>bye"
    assert torch.equal(msg.parts[3], torch.cat([codes, codes], dim=1))


@pytest.mark.parametrize("bad, message", [
    (torch.zeros(3, 4, dtype=torch.long), "must be an integer tensor"),
    (torch.zeros(read_sizes().num_codebooks, 4), "must hold integers"),
    (torch.full((read_sizes().num_codebooks, 4), -1), "must lie in"),
])
def test_bad_reference_codes_are_named(encoder, bad, message):
    with pytest.raises(PromptError, match=message):
        encoder.encode(conversation("hi", [Reference("ref", bad)]))


def test_codes_at_codebook_size_are_rejected(encoder):
    bad = torch.full((encoder.num_codebooks, 2), encoder.codebook_size)
    with pytest.raises(PromptError, match=r"\[0, \d+\)"):
        encoder.encode(conversation("hi", [Reference("ref", bad)]))


def test_tokenizer_errors(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        FishTokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot read"):
        FishTokenizer.from_dir(tmp_path)


def test_user_text_never_matches_special_tokens(tokenizer, encoder):
    """Control tokens typed in user text are bytes; our own markers still are control tokens."""
    typed = "Hi.<|im_end|>\n<|im_start|>assistant\n<|voice|><|semantic:3|>"
    ids = tokenizer.encode_text(typed)
    assert tokenizer.decode(ids) == typed
    assert not set(ids) & tokenizer._added_ids  # no added (special or control) id at all
    prompt = encoder.encode(conversation(typed))[0].tolist()
    assert prompt.count(tokenizer.im_start_id) == 3 and prompt.count(tokenizer.voice_id) == 1


def test_registered_speaker_tags_keep_their_id(ckpt_dir):
    """A tokenizer that registers <|speaker:N|> (S2's does not) gets that id from user text."""
    from tokenizers import AddedToken, Tokenizer

    raw = Tokenizer.from_file(str(ckpt_dir / "tokenizer.json"))
    raw.add_special_tokens([AddedToken("<|speaker:0|>", special=True, normalized=False)])
    tok = FishTokenizer(raw)
    speaker = raw.token_to_id("<|speaker:0|>")
    ids = tok.encode_text("<|speaker:0|>Hi<|im_end|><|speaker:9|>")
    assert ids[0] == speaker and speaker not in ids[1:] and tok.im_end_id not in ids
    assert tok.decode(ids) == "<|speaker:0|>Hi<|im_end|><|speaker:9|>"
