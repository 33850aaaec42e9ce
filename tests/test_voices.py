import pytest
import torch
from safetensors.torch import save_file

from conftest import read_sizes
from fish_core.text.prompt import Reference
from fish_core.speech.voices import Voice, VoiceError

K, C = read_sizes().num_codebooks, read_sizes().codebook_size  # rows and values of a code tensor


def make_voice(clips=2):
    g = torch.Generator().manual_seed(0)
    size = read_sizes()
    return Voice("narrator", [Reference(f"clip {i} text", torch.randint(0, C, (K, 7 + i),
                                                                        generator=g))
                              for i in range(clips)], size.sample_rate, size.frame_length)


def test_round_trip_keeps_everything(tmp_path, sizes):
    voice = make_voice()
    loaded = Voice.load(voice.save(tmp_path / "v.safetensors"), num_codebooks=K, codebook_size=C)
    assert loaded.name == "narrator" and loaded.frames == voice.frames
    for a, b in zip(voice.clips, loaded.clips):
        assert a.text == b.text and torch.equal(a.codes, b.codes) and b.codes.dtype == torch.long
    assert loaded.duration == pytest.approx(voice.frames * sizes.frame_length / sizes.sample_rate)


def test_every_clip_is_tagged_with_the_speaker():
    refs = make_voice().tagged(3)
    assert [r.text for r in refs] == ["<|speaker:3|>clip 0 text", "<|speaker:3|>clip 1 text"]


def write_raw(path, tensors, meta):
    save_file(tensors, str(path), metadata=meta)
    return path


@pytest.mark.parametrize("tensors, meta, message", [
    ({"clip.0": torch.zeros(K, 4, dtype=torch.int32)}, {"format": "other"}, "not a Sailfish voice"),
    ({"clip.0": torch.zeros(K, 4, dtype=torch.int32)},
     {"format": "sailfish-voice", "version": "9", "texts": '["a"]'}, "v9"),
    ({"clip.0": torch.zeros(K, 4, dtype=torch.int32)},
     {"format": "sailfish-voice", "version": "1", "texts": '["a", "b"]'}, "transcripts"),
    ({"clip.0": torch.zeros(K - 1, 4, dtype=torch.int32)},
     {"format": "sailfish-voice", "version": "1", "texts": '["a"]'}, f"{K - 1} codebooks"),
    ({"clip.0": torch.full((K, 4), C, dtype=torch.int32)},
     {"format": "sailfish-voice", "version": "1", "texts": '["a"]'}, rf"\[0, {C}\)"),
    ({"clip.0": torch.zeros(K, 4)},
     {"format": "sailfish-voice", "version": "1", "texts": '["a"]'}, "integers"),
    ({"clip.0": torch.zeros(K, 4, dtype=torch.int32)},
     {"format": "sailfish-voice", "version": "1"}, "damaged metadata"),
])
def test_invalid_files_are_refused(tmp_path, tensors, meta, message):
    path = write_raw(tmp_path / "bad.safetensors", tensors, meta)
    with pytest.raises(VoiceError, match=message):
        Voice.load(path, num_codebooks=K, codebook_size=C)


def test_unreadable_and_missing(tmp_path):
    with pytest.raises(VoiceError, match="not found"):
        Voice.load(tmp_path / "none.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(VoiceError, match="cannot read"):
        Voice.load(junk)
    with pytest.raises(VoiceError, match=".safetensors"):
        make_voice().save(tmp_path / "v.pt")
