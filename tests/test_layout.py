"""Laying out a take while it is generated (``fish_core/speech/layout.py``): the Synthesizer's
``on_chunk`` for tts, takes, a dialogue with pauses and subtitles with gaps, and ``TakeLayout``
on made-up batches.

The chunks must concatenate to the returned waveform exactly (before any 16-bit rounding);
asking for them must not change any output."""

from __future__ import annotations

import pytest
import torch

from conftest import tone
from fish_core.params import Generated
from fish_core.speech.results import Batch, BatchResult
from fish_core.speech.timeline import join_batches
from fish_core.local.driver import ChunkDecoder, decode_batches
from fish_core.speech.layout import TakeLayout
from fish_core.text.srt import parse_srt

FAST = dict(max_new_tokens=24, temperature=0.8, top_p=0.8, top_k=30)
SRT = ("1\n00:00:00,300 --> 00:00:00,900\nFirst cue.\n\n"
       "2\n00:00:01,500 --> 00:00:02,000\nSecond cue, a little longer.\n\n"
       "3\n00:00:02,050 --> 00:00:03,500\nThird.\n")


@pytest.fixture(scope="module")
def synth(tiny_synth):
    return tiny_synth


@pytest.fixture(scope="module")
def voice(synth):
    return synth.encode_voice(tone(synth.sample_rate), "A short reference.", name="Alice",
                              sample_rate=synth.sample_rate)


class Recorder:
    """An ``on_chunk`` that keeps what it is given (and checks each call's contract)."""

    def __init__(self, sample_rate: int):
        self.sample_rate, self.chunks = sample_rate, []

    def __call__(self, samples: torch.Tensor, sample_rate: int) -> None:
        assert sample_rate == self.sample_rate
        assert samples.dtype == torch.float32 and samples.dim() == 1 and samples.shape[0] > 0
        assert samples.device.type == "cpu"
        self.chunks.append(samples)

    @property
    def joined(self) -> torch.Tensor:
        return torch.cat(self.chunks)


def same_speech(a, b) -> None:
    assert torch.equal(a.waveform, b.waveform) and torch.equal(a.codes, b.codes)
    assert [dataclasses_tuple(s) for s in a.segments] == [dataclasses_tuple(s) for s in b.segments]


def dataclasses_tuple(segment):
    return (segment.text, segment.speaker, segment.start_sample, segment.end_sample,
            segment.frames, segment.stopped_on_eos)


# ---------------------------------------------------------------- fish_core: on_chunk
@pytest.mark.parametrize("max_bytes", [300, 24])  # one text batch, then several
def test_tts_chunks_are_the_waveform(synth, voice, max_bytes):
    text = "Hearing the speech while it is made. It must be the same speech."
    record = Recorder(synth.sample_rate)
    speech = synth.tts(text, voice, seed=7, max_bytes=max_bytes, on_chunk=record, **FAST)
    assert len(record.chunks) >= 2  # really piece by piece
    assert torch.equal(record.joined, speech.waveform)
    same_speech(speech, synth.tts(text, voice, seed=7, max_bytes=max_bytes, **FAST))


def test_takes_stream_take_one(synth, voice):
    text = "Three takes, and the first one is heard live."
    record = Recorder(synth.sample_rate)
    takes = synth.tts(text, voice, seed=11, takes=3, on_chunk=record, **FAST)
    assert torch.equal(record.joined, takes[0].waveform)
    for live, plain in zip(takes, synth.tts(text, voice, seed=11, takes=3, **FAST)):
        same_speech(live, plain)


@pytest.mark.parametrize("pause", [0.0, 0.2])
def test_dialogue_chunks_are_the_mix(synth, voice, pause):
    voices = {"Alice": voice, "Bob": voice}
    script = "Alice: Hello there, Bob.\nBob: Hi Alice, how are you?\nAlice: Fine, thanks."
    record = Recorder(synth.sample_rate)
    speech = synth.dialogue(script, voices, pause=pause, turn_by_turn=True, seed=3,
                            on_chunk=record, **FAST)
    assert torch.equal(record.joined, speech.waveform)
    if pause:  # the silences are handed out too, as chunks of their own
        gap = round(pause * synth.sample_rate)
        assert sum(1 for c in record.chunks if c.shape[0] == gap and not c.any()) == 2
    same_speech(speech, synth.dialogue(script, voices, pause=pause, turn_by_turn=True,
                                       seed=3, **FAST))


def test_subtitle_chunks_are_the_timeline(synth, voice):
    record = Recorder(synth.sample_rate)
    result = synth.subtitles(SRT, voice, seed=5, on_chunk=record, **FAST)
    assert torch.equal(record.joined, result.waveform)
    plain = synth.subtitles(SRT, voice, seed=5, **FAST)
    same_speech(result, plain)
    assert result.cues == plain.cues and result.overruns == plain.overruns
    first = round(parse_srt(SRT)[0].start * synth.sample_rate)
    assert record.chunks[0].shape[0] == first and not record.chunks[0].any()  # leading gap


def test_the_layout_of_any_batch_lengths(synth):
    """``TakeLayout`` on made-up batches (0, 1, a few and many frames, with and without
    pauses): the chunks are ``join_batches`` of ``decode_batches``, whether the frames come
    column by column or only at the end of a batch; what it holds back stays bounded."""
    config = synth.runtime.config
    K = config.num_codebooks
    g = torch.Generator().manual_seed(0)
    lengths = [0, 1, 3, 40, 2, 17]
    codes = [torch.randint(0, config.codebook_size, (K, n), generator=g) for n in lengths]
    results = [BatchResult(Batch(f"b{i}"), Generated(c, c, True, 1), 0.0)
               for i, c in enumerate(codes)]
    for pause in (0.0, 0.05):
        for by_column in (True, False):
            record = Recorder(synth.sample_rate)
            layout = TakeLayout(record, synth.sample_rate, [r.batch for r in results], pause)
            decoder = ChunkDecoder(synth.runtime.codec)
            decoded = []
            for c in codes:
                pieces = c.split(1, dim=1) if by_column else [c]
                chunks = [chunk for piece in pieces for chunk in decoder.push(piece)]
                for chunk in chunks + decoder.flush():
                    decoded.append(chunk)
                    layout.chunk(chunk)
                    # only what waits is held (a fade and this chunk), never the whole batch
                    assert sum(u.shape[0] for u in layout.unsent) <= layout.fade + len(chunk)
                layout.end_batch()
            whole = decode_batches(synth.runtime.codec, codes)
            assert torch.equal(torch.cat(decoded), whole)
            want = join_batches(whole, results, synth.sample_rate, synth.runtime.codec.frame_length,
                                pause).waveform
            assert torch.equal(record.joined, want), (pause, by_column)
