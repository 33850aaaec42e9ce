"""The remote client against small stand-in servers that answer as each engine documents
(docs/engines.md: SGLang-Omni SSE chunks of base64 PCM, and the older base64 WAV chunks;
vLLM-Omni raw chunked PCM with ``ref_audio`` data URLs, and the older whole WAV; fish-speech
streaming WAV on ``/v1/tts``) and fail as they fail: the client parses each, detects the
dialect, retries 5xx, fails over to a live endpoint, times out, cancels, and rejects audio it
cannot use; fields an engine refuses fail before anything is sent; models are listed and
chosen; Drama 3 scripts take 16 speakers; voices are registered only with stated consent.
Loopback only; every wait is bounded."""

import asyncio
import base64
import io
import socket
import struct
import threading

import numpy as np
import pytest
import soundfile as sf
import torch

web = pytest.importorskip("aiohttp.web")

from fish_core.params import Cancelled  # noqa: E402
from fish_core.remote import RemoteError, RemoteSynthesizer, RemoteUserError  # noqa: E402
from fish_core.remote import engine_models  # noqa: E402
from fish_core.remote.wire import AudioFormatError  # noqa: E402
from engine_standins import StandIn, pcm, sglang_app, tone, vllm_app, wav  # noqa: E402

FAST = dict(max_new_tokens=8, seed=1)


def streaming_header(rate: int, channels: int = 1) -> bytes:
    """A WAV header of unknown length, as streaming servers send it."""
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"fmt "
            + struct.pack("<IHHIIHH", 16, 1, channels, rate, 2 * rate * channels, 2 * channels, 16)
            + b"data" + struct.pack("<I", 0xFFFFFFFF))


def pcm_read(x: np.ndarray) -> np.ndarray:
    return np.frombuffer(pcm(x), "<i2").astype(np.float32) / 32768.0


def fish_app(rate: int, segments: list[np.ndarray], channels: int = 1,
             endless: bool = False) -> web.Application:
    app = web.Application()
    app["gone"] = threading.Event()

    async def tts(request):
        body = await request.json()
        request.app["seen"].append(body)
        if body.get("reference_id") == "missing":
            return web.json_response({"message": "reference missing not found"}, status=404)
        response = web.StreamResponse(headers={"Content-Type": "audio/wav"})
        await response.prepare(request)
        await response.write(streaming_header(rate, channels))
        try:
            for segment in segments:
                data = pcm(np.repeat(segment, channels))
                await response.write(data[:3])  # odd splits: a sample across two reads
                await response.write(data[3:])
            for _ in range(200 if endless else 0):  # keep talking until the client leaves
                await asyncio.sleep(0.05)
                await response.write(pcm(segments[0][:64]))
        except (Exception, asyncio.CancelledError):  # the client went away
            request.app["gone"].set()
            raise
        await response.write_eof()
        return response

    async def health(request):
        return web.json_response({"status": "ok"})

    app.router.add_post("/v1/tts", tts)
    app.router.add_get("/v1/health", health)
    return app


def free_port() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# ---------------------------------------------------------------- parsing each dialect
def test_sglang_pcm_sse_chunks_detected_and_joined(sizes):
    rate = sizes.sample_rate
    pieces = [tone(rate, 1000), tone(rate, 777, 500.0), tone(rate, 1500, 200.0)]
    with StandIn(sglang_app(rate, pieces)) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        assert synth.dialect.name == "sglang-omni"
        ref = synth.encode_voice(torch.from_numpy(tone(rate, rate // 2)), "Ref words.",
                                 sample_rate=rate)
        speech = synth.tts("Hello.", ref, **FAST)
    expected = np.concatenate([pcm_read(p) for p in pieces])
    np.testing.assert_array_equal(speech.waveform.numpy(), expected)
    body = server.requests[0]
    assert body["stream"] is True and body["response_format"] == "pcm"
    assert body["seed"] == 1 and body["max_new_tokens"] == 8 and body["model"] == "s2-pro"
    reference = body["references"][0]
    assert set(reference) == {"audio_path", "text"}  # no inline "audio" field any more
    assert reference["audio_path"].startswith("data:audio/wav;base64,")
    sent, _ = sf.read(io.BytesIO(base64.b64decode(reference["audio_path"].split(",", 1)[1])),
                      dtype="float32")
    assert reference["text"] == "Ref words." and sent.shape[0] == rate // 2


def test_sglang_older_wav_chunks_still_read(sizes):
    rate = sizes.sample_rate
    pieces = [tone(rate, 900), tone(rate, 333, 500.0)]
    with StandIn(sglang_app(rate, pieces, legacy=True)) as server:
        speech = RemoteSynthesizer(server.url, "sglang-omni", sample_rate=rate).tts(
            "Hello.", **FAST)
    expected = np.concatenate([sf.read(io.BytesIO(wav(p, rate)), dtype="float32")[0]
                               for p in pieces])
    np.testing.assert_array_equal(speech.waveform.numpy(), expected)


def test_sglang_stream_yields_pcm_chunks(sizes):
    rate = sizes.sample_rate
    pieces = [tone(rate, 2048), tone(rate, 1024, 500.0)]
    with StandIn(sglang_app(rate, pieces)) as server:
        with RemoteSynthesizer(server.url, sample_rate=rate).stream("Go.", **FAST) as stream:
            chunks = list(stream)
    assert len(chunks) == 2
    np.testing.assert_array_equal(torch.cat(chunks).numpy(),
                                  np.concatenate([pcm_read(p) for p in pieces]))


def test_vllm_raw_pcm_stream_with_ref_audio_data_url(sizes):
    rate = sizes.sample_rate
    audio = tone(rate, 3001)
    with StandIn(vllm_app(rate, pcm(audio), stream=True)) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        assert synth.dialect.name == "vllm-omni"
        ref = synth.encode_voice(torch.from_numpy(tone(rate, rate // 2)), "Ref.",
                                 sample_rate=rate)
        speech = synth.tts("Hi.", ref, **FAST)
    np.testing.assert_array_equal(speech.waveform.numpy(), pcm_read(audio))
    body = server.requests[0]
    assert body["ref_audio"].startswith("data:audio/wav;base64,") and body["ref_text"] == "Ref."
    assert body["stream"] is True and body["response_format"] == "pcm"
    assert body["stream_format"] == "audio" and body["max_new_tokens"] == 8
    assert body["seed"] == 1  # vLLM-Omni 0.30 seeds the slow AR with it
    assert body["extra_params"] == {"temperature": 0.8, "top_p": 0.8, "top_k": 30}


def test_vllm_openai_sse_deltas_read(sizes):
    rate = sizes.sample_rate
    audio = tone(rate, 2500)
    with StandIn(vllm_app(rate, pcm(audio), stream=True, sse=True)) as server:
        speech = RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("Hi.", **FAST)
    np.testing.assert_array_equal(speech.waveform.numpy(), pcm_read(audio))


def test_vllm_raw_pcm_is_read_at_the_s2_rate_by_default():
    audio = tone(44100, 2000)
    with StandIn(vllm_app(44100, pcm(audio), stream=True)) as server:
        synth = RemoteSynthesizer(server.url, "vllm-omni")
        speech = synth.tts("Hi.", **FAST)
    assert speech.sample_rate == synth.sample_rate == 44100  # raw PCM carries no rate
    np.testing.assert_array_equal(speech.waveform.numpy(), pcm_read(audio))


def test_vllm_older_whole_wav_still_read(sizes):
    rate = sizes.sample_rate
    audio = tone(rate, 3000)
    with StandIn(vllm_app(rate, wav(audio, rate, "FLOAT"))) as server:
        speech = RemoteSynthesizer(server.url, sample_rate=rate).tts("Hi.", **FAST)
    np.testing.assert_array_equal(speech.waveform.numpy(), audio)


def test_fish_streaming_wav_stereo_downmixed_and_detected(sizes):
    rate = sizes.sample_rate
    segments = [tone(rate, 2001), tone(rate, 999, 450.0)]
    with StandIn(fish_app(rate, segments, channels=2)) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        assert synth.dialect.name == "fish-speech"
        speech = synth.tts("Hi there.", **FAST)
    expected = np.concatenate([pcm_read(s) for s in segments])
    np.testing.assert_array_equal(speech.waveform.numpy(), expected)
    body = server.requests[0]
    assert body["streaming"] is True and body["format"] == "wav" and body["text"] == "Hi there."


def test_fish_stream_progress_per_chunk(sizes):
    rate = sizes.sample_rate
    segments = [tone(rate, 2048 * 2), tone(rate, 2048 * 3)]
    seen = []
    with StandIn(fish_app(rate, segments)) as server:
        RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate).tts(
            "Count.", on_progress=lambda d, t: seen.append(d), **FAST)
    # counted in the frames the text is expected to take (as locally), ending at the frames
    # received (5), never at the frame limit
    assert len(seen) >= 3 and seen == sorted(seen) and seen[-1] == 5


# ---------------------------------------------------------------- failures
def test_5xx_is_retried_with_backoff(sizes):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 500)], fail_first=2)) as server:
        synth = RemoteSynthesizer(server.url, "sglang-omni", sample_rate=rate, retries=2,
                                  backoff=0.01)
        assert synth.tts("Retry me.", **FAST).waveform.shape[0] == 500
        assert len(server.requests) == 3
    with StandIn(sglang_app(rate, [tone(rate, 500)], fail_first=5)) as server:
        synth = RemoteSynthesizer(server.url, "sglang-omni", sample_rate=rate, retries=1,
                                  backoff=0.01)
        with pytest.raises(RemoteError, match="HTTP 503: engine overloaded"):
            synth.tts("Retry me.", **FAST)
        assert len(server.requests) == 2  # bounded


def test_fail_over_and_spread_across_endpoints(sizes):
    rate = sizes.sample_rate
    with (StandIn(sglang_app(rate, [tone(rate, 400)])) as a,
            StandIn(sglang_app(rate, [tone(rate, 400)])) as b):
        synth = RemoteSynthesizer([free_port(), a.url, b.url], "sglang-omni", sample_rate=rate,
                                  retries=0, backoff=0.01, connect_timeout=2)
        for _ in range(6):
            assert synth.tts("Spread.", **FAST).waveform.shape[0] == 400
        assert len(a.requests) >= 2 and len(b.requests) >= 2  # both replicas serve


def test_every_endpoint_down_names_them(sizes):
    dead = [free_port(), free_port()]
    with pytest.raises(RemoteError) as error:
        RemoteSynthesizer(dead, "fish-speech", sample_rate=sizes.sample_rate, retries=1,
                          backoff=0.01, connect_timeout=2).tts("Anyone?", **FAST)
    assert all(url in str(error.value) for url in dead)


def test_4xx_names_endpoint_and_server_message(sizes):
    rate = sizes.sample_rate
    with StandIn(fish_app(rate, [tone(rate, 100)])) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate)
        from fish_core.speech.voices import Voice

        with pytest.raises(RemoteUserError, match=rf"{server.url}/v1/tts: HTTP 404: reference "
                                                  "missing not found"):
            synth.dialect.voice_names = lambda transport: ["missing"]
            synth.tts("Hi.", Voice("missing"), **FAST)
        assert len(server.requests) == 1  # a 4xx is not retried


def test_read_timeout(sizes):
    rate = sizes.sample_rate
    app = web.Application()

    async def slow(request):
        await asyncio.sleep(1.5)
        return web.Response(body=b"")

    app.router.add_post("/v1/tts", slow)
    with StandIn(app) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate, retries=0,
                                  read_timeout=0.3)
        with pytest.raises(RemoteError, match="timed out"):
            synth.tts("Slow.", **FAST)


def test_cancel_closes_the_connection(sizes):
    rate = sizes.sample_rate
    app = fish_app(rate, [tone(rate, 2048)] * 4, endless=True)
    with StandIn(app) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate)
        chunks = []

        def cancel():
            return len(chunks) >= 2

        with pytest.raises(Cancelled):
            synth.tts("Stop me.", on_progress=lambda d, t: chunks.append(d), cancel=cancel,
                      **FAST)
        assert app["gone"].wait(10)  # the server saw the client leave


def test_bad_audio_is_rejected_before_callers(sizes):
    rate = sizes.sample_rate
    with StandIn(vllm_app(rate, wav(tone(rate * 2, 100), rate * 2))) as server:
        with pytest.raises(AudioFormatError, match=f"{rate * 2} Hz"):
            RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("x", **FAST)
    with StandIn(vllm_app(rate, wav(np.zeros(0, np.float32), rate))) as server:
        with pytest.raises(AudioFormatError, match="no audio"):
            RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("x", **FAST)
    with StandIn(vllm_app(rate, b'{"not": "audio"}')) as server:  # said WAV, is not
        with pytest.raises(AudioFormatError, match="not WAV"):
            RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("x", **FAST)
    three = np.zeros((10, 3), np.float32)
    with StandIn(vllm_app(rate, wav(three, rate))) as server:
        with pytest.raises(AudioFormatError, match="3 channels"):
            RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("x", **FAST)


def test_bad_options_name_the_field(sizes):
    with pytest.raises(ValueError, match="dialect must be"):
        RemoteSynthesizer("http://127.0.0.1:1", "grpc")
    with pytest.raises(ValueError, match="remote url"):
        RemoteSynthesizer("ftp://x", "sailfish")
    with pytest.raises(ValueError, match="no credentials"):
        RemoteSynthesizer("http://user:secret@127.0.0.1:1", "sailfish")
    with pytest.raises(ValueError, match="retries"):
        RemoteSynthesizer("http://127.0.0.1:1", "sailfish", retries=-1)


def test_stream_yields_chunks_as_they_arrive_and_is_not_replayed(sizes):
    rate = sizes.sample_rate
    segments = [tone(rate, 2048), tone(rate, 1024, 500.0)]
    with StandIn(fish_app(rate, segments)) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate)
        with synth.stream("Streamed.", **FAST) as stream:
            chunks = list(stream)
        assert stream.seed == FAST["seed"] and len(chunks) >= 2
        expected = np.concatenate([pcm_read(s) for s in segments])
        np.testing.assert_array_equal(torch.cat(chunks).numpy(), expected)
    app = web.Application()

    async def breaks(request):  # half a stream, then the connection drops
        response = web.StreamResponse(headers={"Content-Type": "audio/wav"})
        await response.prepare(request)
        await response.write(streaming_header(rate) + pcm(tone(rate, 4096)))
        request.transport.close()
        return response

    app.router.add_post("/v1/tts", breaks)
    with StandIn(app) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate, backoff=0.01)
        with pytest.raises(RemoteError, match="not repeated"):
            list(synth.stream("Broken.", **FAST))


# ---------------------------------------------------------------- limits, before sending
def test_top_k_past_sglang_limit_fails_before_any_request(sizes):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 100)])) as server:
        synth = RemoteSynthesizer(server.url, "sglang-omni", sample_rate=rate)
        for call in (lambda: synth.tts("Hi.", top_k=31, **FAST),
                     lambda: synth.dialogue("A: hi\nB: ho", top_k=50, **FAST),
                     lambda: synth.stream("Hi.", top_k=31, **FAST)):
            with pytest.raises(ValueError, match=r"top_k: the sglang-omni engine takes -1 "
                                                 r"\(off\) or 1 \.\. 30.*got (31|50)"):
                call()
        assert server.requests == []  # refused here, never sent
        assert synth.tts("Hi.", top_k=30, **FAST).waveform.numel()  # the limit itself is fine
        assert server.requests[0]["top_k"] == 30  # sent as the user set it


def test_runaway_answer_stops_at_the_byte_budget(sizes):
    from fish_core.remote.pcm import reply_budget

    rate = sizes.sample_rate
    chunk = pcm(tone(rate, 32768))
    repeat = reply_budget(FAST["max_new_tokens"], rate) // len(chunk) + 2
    with StandIn(vllm_app(rate, chunk, stream=True, repeat=repeat)) as server:
        synth = RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate)
        # The transport and the dialect's reader share one budget; whichever counts first stops.
        with pytest.raises((AudioFormatError, RemoteError),
                           match="larger than this request can produce"):
            synth.tts("Talk forever.", **FAST)


def test_event_stream_lines_are_capped():
    from fish_core.remote.pcm import bounded_lines

    assert (list(bounded_lines(iter([b"ab\ncd", b"e\n", b"f"]), "x", 8)) ==
            [b"ab\n", b"cde\n", b"f"])
    with pytest.raises(AudioFormatError, match="longer than 8 bytes"):
        list(bounded_lines(iter([b"0123", b"45678", b"9\n"]), "x", 8))


# ---------------------------------------------------------------- models
def test_models_listed_first_by_default_chosen_by_name(sizes):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 100)], model_ids=("s2-pro", "drama-3"))) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        assert synth.models == ["s2-pro", "drama-3"] and synth.model == "s2-pro"
        assert synth.spec.family == "s2"
        synth.tts("Hi.", **FAST)
        drama = RemoteSynthesizer(server.url, sample_rate=rate, model="drama-3")
        assert drama.model == "drama-3" and drama.spec.max_speakers == 16
        drama.tts("Hi.", **FAST)
        assert [b["model"] for b in server.requests] == ["s2-pro", "drama-3"]
        with pytest.raises(ValueError, match=r"model 'nope' is not served by .*; it serves "
                                             r"'s2-pro', 'drama-3'"):
            RemoteSynthesizer(server.url, sample_rate=rate, model="nope")
        assert len(server.requests) == 2
        assert engine_models(server.url) == ["s2-pro", "drama-3"]


def test_codes_are_an_error_naming_the_remote_model(sizes):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 100)], model_ids=("drama-3",))) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        with pytest.raises(ValueError, match="drama-3.*audio only: codes"):
            synth.require_codec()
        voice = synth.encode_voice(torch.from_numpy(tone(rate, rate // 4)), "Ref.",
                                   sample_rate=rate)
        with pytest.raises(ValueError, match="remote model drama-3.*cannot encode a voice to "
                                             "codes"):
            voice.save("x.safetensors")
        assert synth.tts("Hi.", **FAST).codes.shape[0] == 0  # audio only: no codebooks


# ---------------------------------------------------------------- Drama 3
def drama(server, rate):
    return RemoteSynthesizer(server.url, "sglang-omni", sample_rate=rate, model="drama-3")


def test_drama3_sixteen_speakers_voices_given_and_invented(sizes):
    rate = sizes.sample_rate
    lengths = [rate // 4 + 10 * i for i in range(2)]
    with StandIn(sglang_app(rate, [tone(rate, 300)], model_ids=("s2-pro", "drama-3"))) as server:
        synth = drama(server, rate)
        voices = [synth.encode_voice(torch.from_numpy(tone(rate, n)), f"Voice {i}.",
                                     name=f"v{i}", sample_rate=rate)
                  for i, n in enumerate(lengths)]
        script = "".join(f"<|speaker:{i}|>[whispering] Line {i}." for i in range(16))
        speech = synth.dialogue(script, voices, pause=0.1, **FAST)
        assert len(server.requests) == 16
        for i, body in enumerate(server.requests):
            assert body["input"] == f"[whispering] Line {i}."  # directions pass untouched
            assert ("references" in body) == (i < 2)  # voices for two, the model invents 14
        assert server.requests[1]["references"][0]["text"] == "Voice 1."
        assert speech.tracks(16).shape[0] == 16 and len(speech.segments) == 16
        assert [s.first_speaker for s in speech.segments] == list(range(16))
        takes = synth.dialogue(script, voices, takes=2, **FAST)
        assert len(takes) == 2 and takes[1].seed == takes[0].seed + 1
        srt = "".join(f"{i + 1}\n00:00:0{i},000 --> 00:00:0{i},900\n[laughs] cue {i}\n\n"
                      for i in range(3))
        subtitles = synth.subtitles(srt, voices[0], **FAST)
        assert len(subtitles.cues) == 3
        assert server.requests[-1]["input"] == "[laughs] cue 2"
        sent = len(server.requests)
        with pytest.raises(ValueError, match="speaker 16 is past drama-3's 16 speakers"):
            synth.dialogue(script + "<|speaker:16|>One too many.", voices, **FAST)
        with pytest.raises(ValueError, match="speaker 17 is past drama-3's 16"):
            synth.tts("<|speaker:17|>Hi.", **FAST)
        assert len(server.requests) == sent  # refused before sending
        s2 = RemoteSynthesizer(server.url, "sglang-omni", sample_rate=rate)  # first: s2-pro
        with pytest.raises(ValueError, match="no reference voice"):
            s2.dialogue(script, voices, **FAST)  # S2 keeps its rule: a voice per speaker
        assert len(server.requests) == sent


def test_drama3_whole_script_in_one_request(sizes):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 500)], model_ids=("drama-3",))) as server:
        synth = drama(server, rate)
        voices = [synth.encode_voice(torch.from_numpy(tone(rate, rate // 4)), f"Ref {i}.",
                                     name=name, sample_rate=rate)
                  for i, name in enumerate(["Alice", "Bob"])]
        script = "Alice: Hi [sighs].\nBob: Hello.\nCarol: And me."
        speech = synth.dialogue(script, voices, turn_by_turn=False, **FAST)
    (body,) = server.requests
    assert body["input"] == ("<|speaker:0|>Hi [sighs].\n<|speaker:1|>Hello.\n"
                             "<|speaker:2|>And me.")
    assert [r["text"] for r in body["references"]] == ["<|speaker:0|>Ref 0.",
                                                       "<|speaker:1|>Ref 1."]
    assert len(speech.segments) == 1 and speech.waveform.shape[0] == 500


# ---------------------------------------------------------------- consent
@pytest.mark.parametrize("app", ["sglang", "vllm"])
def test_registering_a_voice_needs_stated_consent(sizes, app):
    rate = sizes.sample_rate
    make = (sglang_app(rate, [tone(rate, 100)]) if app == "sglang" else
            vllm_app(rate, pcm(tone(rate, 100)), stream=True))
    with StandIn(make) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        voice = synth.encode_voice(torch.from_numpy(tone(rate, rate // 4)), "My words.",
                                   name="me", sample_rate=rate)
        with pytest.raises(ValueError, match="voice_consent: .* never states it for you"):
            synth.register_voice(voice)
        with pytest.raises(ValueError, match="voice_consent"):
            RemoteSynthesizer(server.url, sample_rate=rate, register_voices=True)
        with pytest.raises(ValueError, match="letters, digits"):
            synth.register_voice(voice, name="no spaces", consent="yes")
        assert make["registered"] == []  # nothing sent without consent or with a bad name
        saved = synth.register_voice(voice, name="me.v1", consent="consent-1234")
        (fields,) = make["registered"]
        assert fields["consent"] == "consent-1234" and fields["name"] == "me.v1"
        assert fields["ref_text"] == "My words." and fields["audio_sample"][:4] == b"RIFF"
        synth.tts("In my voice.", saved, **FAST)
        assert server.requests[-1]["voice"] == "me.v1"
        auto = RemoteSynthesizer(server.url, sample_rate=rate, register_voices=True,
                                 voice_consent="consent-5678")
        auto.tts("Again.", voice, **FAST)
        assert make["registered"][-1]["consent"] == "consent-5678"
        assert server.requests[-1]["voice"].startswith("sailfish-")


def test_consent_is_not_sent_where_the_engine_has_no_such_field(sizes):
    from fish_core.remote.dialects import DIALECTS, Clip

    sent = []

    class Recording:
        def request(self, method, path, read, **kw):
            sent.append(kw["body"])

    clip = Clip(torch.from_numpy(tone(sizes.sample_rate, 100)), sizes.sample_rate, "Words.")
    for name in ("sailfish", "fish-speech"):
        DIALECTS[name].add_voice(Recording(), "me", clip, "consent-1234")
    assert sent and all(b"consent" not in body for body in sent)


# ---------------------------------------------------------------- CLI
def test_cli_remote_model_drama_script_and_voice_register(tmp_path, capsys):
    from fish_core import cli

    rate = 44100  # the CLI takes the engine's rate: S2's unless the engine says otherwise
    sf.write(tmp_path / "me.wav", tone(rate, rate // 2), rate)
    (tmp_path / "play.txt").write_text("Ann: [cheerful] Hi!\nBen: Hello.\nCy: Hey.\n")
    app = sglang_app(rate, [tone(rate, 700)], model_ids=("s2-pro", "drama-3"))
    with StandIn(app) as server:
        engine = ["--remote", server.url, "--max-new-tokens", "8", "--seed", "3"]
        assert cli.main(["say", "--script", str(tmp_path / "play.txt"), "--ref-audio",
                         str(tmp_path / "me.wav"), "--ref-text", "My words.", "-o",
                         str(tmp_path / "play.wav"), *engine, "--remote-model", "drama-3"]) == 0
        # Drama 3 without a pause: the whole script is one request (as a local conversation),
        # each turn tagged with its speaker, the direction untouched, Ann's clip as speaker 0's.
        [body] = server.requests
        assert body["model"] == "drama-3"
        assert body["input"] == ("<|speaker:0|>[cheerful] Hi!\n<|speaker:1|>Hello.\n"
                                 "<|speaker:2|>Hey.")
        assert [r["text"] for r in body["references"]] == ["<|speaker:0|>My words."]
        assert sf.info(tmp_path / "play.wav").frames == 700
        server.requests.clear()
        assert cli.main(["say", "--script", str(tmp_path / "play.txt"), "--ref-audio",
                         str(tmp_path / "me.wav"), "--ref-text", "My words.", "-o",
                         str(tmp_path / "play.wav"), *engine, "--remote-model", "drama-3",
                         "--pause", "0.2"]) == 0  # a pause: one request per turn
        assert [b["model"] for b in server.requests] == ["drama-3"] * 3
        assert server.requests[0]["input"] == "[cheerful] Hi!"
        assert "references" in server.requests[0] and "references" not in server.requests[1]
        capsys.readouterr()
        assert cli.main(["say", "Hi.", "-o", str(tmp_path / "x.wav"), *engine,
                         "--remote-model", "nope"]) == 2
        assert "'s2-pro', 'drama-3'" in capsys.readouterr().err
        register = ["voice", "register", str(tmp_path / "me.wav"), "--text", "My words.",
                    "--name", "me", "--remote", server.url]
        assert cli.main(register) == 2
        assert "voice_consent" in capsys.readouterr().err and app["registered"] == []
        assert cli.main([*register, "--voice-consent", "consent-42"]) == 0
        assert app["registered"][0]["consent"] == "consent-42"
        assert app["registered"][0]["name"] == "me"


def test_a_voice_of_several_clips_is_sent_inline_not_registered(sizes):
    from fish_core.remote.voices import RemoteVoice

    rate = sizes.sample_rate
    app = sglang_app(rate, [tone(rate, 100)])
    with StandIn(app) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate, register_voices=True,
                                  voice_consent="consent-1")
        one = synth.encode_voice(torch.from_numpy(tone(rate, rate // 4)), "One.",
                                 sample_rate=rate)
        two = RemoteVoice("two", [], rate, 2048, one.references * 2)
        synth.tts("Hi.", two, **FAST)  # a store keeps one clip: both go inline
        assert app["registered"] == [] and len(server.requests[0]["references"]) == 2


def count_model_lists(monkeypatch) -> list[str]:
    """Every ``GET /v1/models`` the client sends (recorded at the transport)."""
    from fish_core.remote.http import Transport

    sent, request = [], Transport.request

    def counting(self, method, path, *args, **kwargs):
        if path == "/v1/models":
            sent.append(method)
        return request(self, method, path, *args, **kwargs)

    monkeypatch.setattr(Transport, "request", counting)
    return sent


@pytest.mark.parametrize("make", [lambda rate: sglang_app(rate, [tone(rate, 100)]),
                                  lambda rate: vllm_app(rate, pcm(tone(rate, 100)), stream=True)])
def test_the_model_list_is_fetched_once(sizes, monkeypatch, make):
    """Detecting the dialect, checking the model asked for, choosing the default and listing
    the models share one ``/v1/models`` answer (they fetched it twice before)."""
    sent = count_model_lists(monkeypatch)
    with StandIn(make(sizes.sample_rate)) as server:
        remote = RemoteSynthesizer(server.url, "auto", model="s2-pro")
        assert remote.models == ["s2-pro"] and remote.model == "s2-pro"
        remote.tts("Hello.", **FAST)
        assert len(sent) == 1
        assert engine_models(server.url) == ["s2-pro"] and len(sent) == 2  # a client of its own
        chosen = RemoteSynthesizer(server.url, remote.dialect.name)
        assert chosen.model == "s2-pro" and len(sent) == 3


# ---------------------------------------------------------------- sampling and seeds per engine
def test_fish_speech_takes_seed_temperature_top_p_and_refuses_what_it_cannot(sizes):
    """fish-speech's ServeTTSRequest takes seed, temperature and top_p (0.1 .. 1.0); its top_k
    is fixed (30) and a seed past 2**31 is clamped to one there: both refused before sending."""
    rate = sizes.sample_rate
    with StandIn(fish_app(rate, [tone(rate, 300)])) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate)
        synth.tts("Hi.", temperature=0.6, top_p=0.9, **FAST)
        [body] = server.requests
        assert (body["seed"], body["temperature"], body["top_p"]) == (1, 0.6, 0.9)
        assert body["max_new_tokens"] == 8 and "top_k" not in body
        for options, message in [
                (dict(top_k=20), r"^top_k: the fish-speech engine takes no top_k .* leave top_k "
                                 r"at 30"),
                (dict(temperature=1.5), r"^temperature: the fish-speech engine takes "
                                        r"temperature 0.1 .. 1.0, got 1.5"),
                (dict(seed=2**31 + 1), r"^seed: the fish-speech engine takes seeds 0 .. "
                                       r"2147483648")]:
            with pytest.raises(ValueError, match=message):
                synth.tts("Hi.", **{**FAST, **options})
        assert len(server.requests) == 1  # nothing more sent
        speech = synth.tts("Hi.", max_new_tokens=8)  # a fresh seed: one the engine takes
        assert server.requests[-1]["seed"] == speech.seed <= 2**30


def test_sglang_sends_every_sampling_field(sizes):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 300)])) as server:
        RemoteSynthesizer(server.url, sample_rate=rate).tts(
            "Hi.", temperature=0.5, top_p=0.7, top_k=12, **FAST)
    [body] = server.requests
    assert {k: body[k] for k in ("seed", "temperature", "top_p", "top_k")} == {
        "seed": 1, "temperature": 0.5, "top_p": 0.7, "top_k": 12}


# ---------------------------------------------------------------- engine voices by name
def test_an_engine_voice_by_name_in_python(sizes):
    rate = sizes.sample_rate
    app = vllm_app(rate, pcm(tone(rate, 300)), stream=True)
    app["voices"].append("me")
    with StandIn(app) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        assert synth.engine_voices() == ["me"]
        synth.tts("Hi.", voice="me", **FAST)
        synth.dialogue("me: Hi.\nme: Bye.", ["me"], **FAST)
        assert [b["voice"] for b in server.requests] == ["me"] * 3
        assert all("ref_audio" not in b for b in server.requests)
        with pytest.raises(ValueError, match=r"voice 'you' is not one of the voices of "
                                             rf"{server.url}; it has 'me'\. Register it"):
            synth.tts("Hi.", voice="you", **FAST)
        assert len(server.requests) == 3


def test_cli_voice_name_with_remote_is_the_engines_voice(tmp_path, capsys):
    from fish_core import cli

    app = vllm_app(44100, pcm(tone(44100, 500)), stream=True)
    app["voices"].append("me")
    with StandIn(app) as server:
        engine = ["--remote", server.url, "--max-new-tokens", "8", "--seed", "3"]
        out = str(tmp_path / "me.wav")
        assert cli.main(["say", "Hi.", "--voice", "me", "-o", out, *engine]) == 0
        assert server.requests[-1]["voice"] == "me" and sf.info(out).frames == 500
        capsys.readouterr()
        assert cli.main(["say", "Hi.", "--voice", "you", "-o", out, *engine]) == 2
        assert "voice 'you' is not one of the voices of" in capsys.readouterr().err
        assert len(server.requests) == 1
    # without --remote a name is still a missing file, with a hint
    assert cli.main(["say", "Hi.", "--voice", "me", "-o", out]) == 2
    err = capsys.readouterr().err
    assert "file not found: me" in err and "with --remote" in err


# ---------------------------------------------------------------- served model names
@pytest.mark.parametrize("served,asked,named", [
    (("fishaudio/s2-pro",), "s2-pro", "fishaudio/s2-pro"),
    (("/models/cache/tiny-s2-vo",), "s2-pro", "/models/cache/tiny-s2-vo"),
    (("fishaudio/drama-3", "/ckpt/s2-pro-fp8"), "fishaudio/s2-pro", "/ckpt/s2-pro-fp8"),
    (("fishaudio/s2-pro", "/ckpt/drama3-fp8"), "drama-3", "/ckpt/drama3-fp8")])
def test_a_model_name_resolves_to_the_one_model_the_engine_serves(sizes, served, asked, named):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 100)], model_ids=served)) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate, model=asked)
        assert synth.model == named
        synth.tts("Hi.", **FAST)
        assert server.requests[-1]["model"] == named


def test_an_unclear_model_name_lists_the_served_names(sizes):
    rate = sizes.sample_rate
    served = ("/ckpt/a", "/ckpt/b")
    with StandIn(sglang_app(rate, [tone(rate, 100)], model_ids=served)) as server:
        for asked in ("s2-pro", "nope"):
            with pytest.raises(ValueError, match=rf"model '{asked}' is not served by .*; it "
                                                 r"serves '/ckpt/a', '/ckpt/b'"):
                RemoteSynthesizer(server.url, sample_rate=rate, model=asked)


# ---------------------------------------------------------------- health
def sick_app(rate: int, ready: list[int] | None = None, worker: str | None = None,
             status: int = 500, message: str = "Stage-0 has no live replica",
             broken: bool = False) -> web.Application:
    """A replica whose speech always fails (vLLM-Omni after a stage crashed: 500 "no live
    replica" while /v1/models answers; ``broken``: as it answers a streamed request then, a
    chunked 200 that ends before its first byte); ``ready``: what its /ready answers, in turn
    (a router); ``worker``: the sgl-omni-router worker id header it sends."""
    app = web.Application()
    app["ready"] = ready

    async def speech(request):
        request.app["seen"].append(await request.json())
        if broken:
            response = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            request.transport.close()
            return response
        headers = {"X-SGLang-Omni-Worker": worker} if worker else {}
        return web.json_response({"error": {"message": message}}, status=status,
                                 headers=headers)

    async def is_ready(request):
        answers = request.app["ready"]
        return web.json_response({}, status=answers.pop(0) if len(answers) > 1 else answers[0])

    app.router.add_post("/v1/audio/speech", speech)
    if ready is not None:
        app.router.add_get("/ready", is_ready)
    return app


@pytest.mark.parametrize("broken", [False, True])
def test_a_replica_with_no_live_replica_is_marked_down(sizes, broken):
    rate = sizes.sample_rate
    with (StandIn(sick_app(rate, broken=broken)) as sick,
          StandIn(sglang_app(rate, [tone(rate, 300)])) as well):
        synth = RemoteSynthesizer([sick.url, well.url], "sglang-omni", sample_rate=rate,
                                  retries=1, backoff=0.01)
        for _ in range(5):
            assert synth.tts("Hi.", **FAST).waveform.shape[0] == 300
        assert len(sick.requests) == 1 and len(well.requests) == 5  # asked once, then skipped


def test_a_routers_ready_brings_a_replica_back(sizes):
    from fish_core.remote import http as remote_http

    rate = sizes.sample_rate
    with (StandIn(sick_app(rate, ready=[503, 200])) as router,
          StandIn(sglang_app(rate, [tone(rate, 300)])) as well):
        synth = RemoteSynthesizer([router.url, well.url], "sglang-omni", sample_rate=rate,
                                  retries=1, backoff=0.01)
        synth.tts("Hi.", **FAST)
        transport = synth.engine.transport
        [down] = [e for e in transport.endpoints if e.url == router.url]
        if not transport.down:  # the well replica came first: make the router fail once
            synth.tts("Hi.", **FAST)
        assert transport.is_down(down)  # /ready: 503, no worker routable
        transport.probed.clear()
        assert not transport.is_down(down)  # /ready: 200, back in the rotation
        assert remote_http.DOWN_SECONDS > 1  # came back early, not by its cool-down


def test_the_worker_behind_a_router_is_named_in_errors_and_logs(sizes, caplog):
    rate = sizes.sample_rate
    with StandIn(sick_app(rate, worker="worker-b", status=400, message="bad voice")) as router:
        synth = RemoteSynthesizer(router.url, "sglang-omni", sample_rate=rate)
        with pytest.raises(RemoteUserError, match=r"/v1/audio/speech \(worker worker-b\): "
                                                  r"HTTP 400: bad voice"):
            synth.tts("Hi.", **FAST)
    app = sglang_app(rate, [tone(rate, 300)])

    @web.middleware
    async def tag(request, handler):
        response = await handler(request)
        response.headers["X-SGLang-Omni-Worker"] = "worker-a"
        return response

    app.middlewares.append(tag)
    with StandIn(app) as router, caplog.at_level("INFO", logger="sailfish.remote"):
        RemoteSynthesizer(router.url, "sglang-omni", sample_rate=rate).tts("Hi.", **FAST)
    assert any("(worker worker-a): HTTP 200" in r.getMessage() for r in caplog.records)
