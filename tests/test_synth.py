"""End-to-end synthesis on the tiny fixture checkpoint: TTS, cloning, dialogue, subtitles."""

import dataclasses
import json
import math

import pytest
import torch

from fish_core.engine.rows import RowBatch
from fish_core.loading.hub import ModelNotFound
from fish_core.params import Cancelled
from fish_core.local.synthesizer import Synthesizer
from fish_core.text.srt import parse_srt
from fish_core.text.script import ScriptError

FAST = dict(max_new_tokens=6, temperature=0.8, top_p=0.8, top_k=30)


@pytest.fixture(scope="module")
def synth(ckpt_dir):
    return Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32")


REF_RATE = 44100  # the reference clip's own rate; encode_voice resamples it to the codec's


@pytest.fixture(scope="module")
def voice(synth):
    t = torch.arange(REF_RATE // 2) / REF_RATE
    wave = 0.3 * torch.sin(2 * math.pi * 220 * t) + 0.01 * torch.randn(t.shape[0])
    return synth.encode_voice({"waveform": wave[None, None], "sample_rate": REF_RATE},
                              "A short reference.", name="Ref")


def record_prompts(synth, monkeypatch):
    lengths = []
    original = synth.runtime.prompt

    def spy(*args, **kwargs):
        prompt = original(*args, **kwargs)
        lengths.append(prompt.shape[1])  # one prompt per take and text batch
        return prompt

    monkeypatch.setattr(synth.runtime, "prompt", spy)
    return lengths


def test_tts_output_contract(synth, sizes):
    speech = synth.tts("Hello there, this is a test.", seed=1, **FAST)
    frames = speech.codes.shape[1]
    assert speech.sample_rate == sizes.sample_rate
    assert speech.waveform.dtype == torch.float32 and speech.waveform.dim() == 1
    assert speech.waveform.shape[0] == frames * sizes.frame_length
    assert speech.segments[0].frames == frames and speech.segments[0].end == pytest.approx(
        frames * sizes.frame_length / sizes.sample_rate)
    assert speech.waveform.abs().max() <= 1.0


def test_same_seed_same_audio_different_seed_differs(synth):
    a = synth.tts("Same seed, same audio.", seed=5, **FAST)
    b = synth.tts("Same seed, same audio.", seed=5, **FAST)
    c = synth.tts("Same seed, same audio.", seed=6, **FAST)
    assert a.seed == b.seed == 5
    assert torch.equal(a.codes, b.codes) and torch.equal(a.waveform, b.waveform)
    assert not torch.equal(a.codes, c.codes)


def test_long_text_makes_batches_with_a_bounded_prompt(synth, sizes, monkeypatch):
    lengths = record_prompts(synth, monkeypatch)
    text = " ".join(f"This is sentence number {i} of a long text." for i in range(30))
    speech = synth.tts(text, seed=2, max_bytes=90, history_turns=1, **FAST)
    assert len(speech.segments) == len(lengths) >= 8
    # with one turn of history, the prompt stops growing after the second batch
    assert max(lengths) <= max(lengths[:3]) + 8
    assert speech.waveform.shape[0] == speech.codes.shape[1] * sizes.frame_length
    starts = [s.start for s in speech.segments]
    assert starts == sorted(starts) and speech.segments[-1].end == pytest.approx(speech.duration)


def test_history_is_trimmed_to_fit_the_context(ckpt_dir, monkeypatch):
    small = Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32", context_length=140)
    lengths = record_prompts(small, monkeypatch)
    text = " ".join(f"Sentence {i} is here." for i in range(12))
    small.tts(text, seed=3, max_bytes=40, history_turns=10, **FAST)
    assert len(lengths) >= 4
    assert all(n + min(FAST["max_new_tokens"], 70) <= 140 for n in lengths)


def test_clone_voice_save_load_same_codes(synth, voice, sizes, tmp_path):
    from fish_core.speech.voices import Voice

    # 0.5 s of reference audio, resampled to the codec's rate
    assert voice.frames == math.ceil(0.5 * sizes.sample_rate / sizes.frame_length)

    path = voice.save(tmp_path / "ref.safetensors")
    config = synth.runtime.config
    loaded = Voice.load(path, config.num_codebooks, config.codebook_size)
    assert loaded.name == "Ref" and len(loaded.clips) == 1
    assert torch.equal(loaded.clips[0].codes, voice.clips[0].codes)
    assert loaded.clips[0].text == voice.clips[0].text
    a = synth.tts("Cloned speech.", voice=voice, seed=4, **FAST)
    b = synth.tts("Cloned speech.", voice=loaded, seed=4, **FAST)
    assert torch.equal(a.codes, b.codes)


def test_dialogue_pauses_and_speakers(synth, voice, sizes):
    script = "Alice: Hello Bob.\nBob: Hi Alice.\nAlice: Bye."
    speech = synth.dialogue(script, {"Alice": voice, "Bob": voice}, pause=0.25, seed=1, **FAST)
    assert [s.speaker for s in speech.segments] == [0, 1, 0]
    rate = sizes.sample_rate
    gap = round(0.25 * rate)
    for prev, nxt in zip(speech.segments, speech.segments[1:]):
        assert nxt.start - prev.end == pytest.approx(gap / rate)
        silent = speech.waveform[round(prev.end * rate) + 10: round(nxt.start * rate) - 10]
        assert silent.abs().max() == 0
    assert speech.waveform.shape[0] == speech.codes.shape[1] * sizes.frame_length + 2 * gap


def test_dialogue_speaker_without_voice_is_an_error(synth, voice):
    with pytest.raises(ScriptError, match="Carol"):
        synth.dialogue("Alice: Hi.\nCarol: Hello.", {"Alice": voice}, **FAST)


def test_text_before_the_first_tag_is_kept(synth):
    speech = synth.tts("Intro words. <|speaker:0|>Tagged words.", seed=1, **FAST)
    assert speech.segments[0].text.startswith("Intro words.")


def test_subtitles_follow_the_timeline(synth, voice, sizes):
    srt = ("1\n00:00:00,500 --> 00:00:01,500\nFirst cue.\n\n"
           "2\n00:00:02,000 --> 00:00:03,000\nSecond cue.\n\n"
           "3\n00:00:03,100 --> 00:00:04,000\nThird cue.\n")
    result = synth.subtitles(srt, voice, seed=1, **FAST)
    frame = sizes.frame_length / sizes.sample_rate
    cues = parse_srt(srt)
    for want, got in zip(cues, result.cues):
        if not any(f"cue {want.index} starts" in o for o in result.overruns):
            assert abs(got.start - want.start) <= frame
    assert result.duration >= cues[-1].end - 1e-6
    written = parse_srt(result.srt())
    assert [c.text for c in written] == [c.text for c in result.cues]
    for w, c in zip(written, result.cues):
        assert w.start == pytest.approx(c.start, abs=1e-3) and w.end == pytest.approx(c.end,
                                                                                      abs=1e-3)


def test_subtitle_overrun_is_reported_not_cut(synth):
    srt = ("1\n00:00:00,000 --> 00:00:00,050\nA cue far too long for its slot.\n\n"
           "2\n00:00:00,060 --> 00:00:01,000\nNext.\n")
    result = synth.subtitles(srt, seed=1, max_new_tokens=12)
    first = result.segments[0]
    assert first.frames >= 2  # generated in full
    assert any("cue 1" in o and "cue 2" in o for o in result.overruns)
    assert result.cues[1].start >= result.cues[0].end  # later cue moved, nothing overlaps


def test_progress_and_cancel(synth):
    seen = []
    synth.tts("Progress please.", seed=1, on_progress=lambda d, t: seen.append((d, t)), **FAST)
    assert seen and seen[-1][0] == seen[-1][1] and all(t == seen[0][1] for _, t in seen)
    with pytest.raises(Cancelled):
        synth.tts("Cancel me.", seed=1, cancel=lambda: True, **FAST)
    assert synth.tts("Still usable.", seed=1, **FAST).waveform.numel() > 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(text=""), "empty"),
    (dict(text="hi", temperature=0), "temperature"),
    (dict(text="hi", history_turns=-1), "history_turns"),
])
def test_bad_requests_are_named(synth, kwargs, message):
    with pytest.raises(ValueError, match=message):
        synth.tts(**{**FAST, **kwargs})


def test_bad_reference_audio_is_named(synth):
    with pytest.raises(ValueError, match="silent"):
        synth.encode_voice(torch.zeros(REF_RATE), "words", sample_rate=REF_RATE)
    # A blank transcript asks the speech recogniser; with none here (offline, no --asr folder)
    # that is one error naming the reference transcript, before any download.
    with pytest.raises(ModelNotFound, match="reference transcript"):
        synth.encode_voice(torch.rand(REF_RATE) - 0.5, "  ", sample_rate=REF_RATE)


def test_speech_with_no_frames_is_an_error_not_silence(synth, monkeypatch):
    from fish_core.params import Generated, GenerationError

    config = synth.runtime.config
    eos = torch.zeros(1 + config.num_codebooks, 1, dtype=torch.long)
    eos[0] = config.eos_token_id
    empty = Generated(torch.zeros(config.num_codebooks, 0, dtype=torch.long), eos, True, 10, 1)
    monkeypatch.setattr(RowBatch, "leave", lambda self, r: empty)  # the row ended at once
    with pytest.raises(GenerationError, match="before producing any audio"):
        synth.tts("Nothing comes out.", **FAST)


# ---------------------------------------------------------------- takes, tracks, timeline
def check_timeline(speech, frame_length, pause_samples=0):
    """Segments cover the waveform in order, without gaps or overlaps except the pauses."""
    segments = speech.segments
    assert segments[0].start_sample == 0 and segments[-1].end_sample == speech.waveform.shape[0]
    for prev, nxt in zip(segments, segments[1:]):
        assert nxt.start_sample - prev.end_sample == pause_samples
    for s in segments:
        assert s.end_sample - s.start_sample == s.frames * frame_length


def test_takes_equal_single_runs_with_consecutive_seeds(synth, voice):
    text = "First sentence of the take. Second sentence, in its own batch."
    kwargs = dict(voice=voice, max_bytes=40, **FAST)
    takes = synth.tts(text, seed=11, takes=3, **kwargs)
    assert [t.seed for t in takes] == [11, 12, 13]
    for k, take in enumerate(takes):
        single = synth.tts(text, seed=11 + k, **kwargs)
        assert len(take.segments) == len(single.segments) >= 2
        assert torch.equal(take.codes, single.codes)
        assert torch.equal(take.waveform, single.waveform)
        check_timeline(take, synth.runtime.codec.frame_length)
        assert take.segments == [dataclasses.replace(t, seconds=s.seconds)
                                 for t, s in zip(single.segments, take.segments)]
    assert not torch.equal(takes[0].codes[:, :4], takes[1].codes[:, :4])
    assert len(synth.tts("One take.", seed=1, takes=1, **FAST)) == 1
    with pytest.raises(ValueError, match="takes must be an integer in 1 .. 8"):
        synth.tts("Too many.", takes=9, **FAST)


def test_dialogue_takes_and_tracks(synth, voice):
    script = "Alice: Hello Bob.\nBob: Hi Alice.\nAlice: Bye now."
    voices = {"Alice": voice, "Bob": voice}
    takes = synth.dialogue(script, voices, turn_by_turn=True, seed=5, takes=2, **FAST)
    for k, take in enumerate(takes):
        single = synth.dialogue(script, voices, turn_by_turn=True, seed=5 + k, **FAST)
        assert torch.equal(take.codes, single.codes)
        assert [s.speaker for s in take.segments] == [0, 1, 0]
        check_timeline(take, synth.runtime.codec.frame_length)
        tracks = take.tracks(4)
        assert tracks.shape == (4, take.waveform.shape[0])
        assert torch.equal(tracks.sum(dim=0), take.waveform)  # exact: one non-zero per sample
        for s in take.segments:
            window = slice(s.start_sample, s.end_sample)
            assert torch.equal(tracks[s.speaker, window], take.waveform[window])
        assert tracks[2:].abs().max() == 0


def test_tracks_with_pauses_and_mixed_batches(synth, voice):
    script = "Alice: Hello Bob.\nBob: Hi Alice."
    voices = {"Alice": voice, "Bob": voice}
    paused = synth.dialogue(script, voices, pause=0.1, seed=2, **FAST)
    gap = round(0.1 * paused.sample_rate)
    check_timeline(paused, synth.runtime.codec.frame_length, pause_samples=gap)
    assert torch.equal(paused.tracks(2).sum(dim=0), paused.waveform)
    flowing = synth.dialogue(script, voices, seed=2, **FAST)  # one batch for both turns
    assert [s.speaker for s in flowing.segments] == [None]
    tracks = flowing.tracks(2)
    assert torch.equal(tracks[0], flowing.waveform) and tracks[1].abs().max() == 0


def test_timeline_json_has_one_shape(synth, voice):
    from fish_core.speech.results import timeline_json

    takes = synth.tts("A timeline. In two batches.", seed=3, takes=2, max_bytes=16, **FAST)
    data = json.loads(timeline_json(takes))
    assert data["sample_rate"] == takes[0].sample_rate
    assert [t["take"] for t in data["takes"]] == [0, 1]
    for entry, take in zip(data["takes"], takes):
        assert entry["seed"] == take.seed and entry["samples"] == take.waveform.shape[0]
        assert len(entry["segments"]) == len(take.segments) >= 2
        for got, seg in zip(entry["segments"], take.segments):
            assert set(got) == {"speaker", "text", "start", "end", "start_sample", "end_sample",
                                "frames", "stopped_on_eos"}
            assert (got["start_sample"], got["end_sample"]) == (seg.start_sample, seg.end_sample)
            assert got["start"] == pytest.approx(seg.start, abs=1e-6)
    srt = "1\n00:00:00,200 --> 00:00:01,000\nHi.\n"
    subtitles = json.loads(timeline_json([synth.subtitles(srt, voice, seed=1, **FAST)]))
    assert set(subtitles) == set(data) and set(subtitles["takes"][0]) == set(data["takes"][0])


def test_codec_precision_default_and_choice(synth, ckpt_dir):
    """The codec loads in codec_dtypes_for(device) (fp32 on the CPU) unless ``codec_dtype``
    names one precision for both paths (a name or a torch dtype)."""
    def dtypes(made):
        return made.runtime.codec.encode_dtype, made.runtime.codec.decode_dtype

    assert dtypes(synth) == (torch.float32, torch.float32)
    half = Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32", codec_dtype="fp16")
    assert dtypes(half) == (torch.float16, torch.float16)
    with pytest.raises(ValueError, match="precision must be one of"):
        Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32", codec_dtype="fp12")
