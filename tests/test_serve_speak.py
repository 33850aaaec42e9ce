"""``serve/api/speak.py``: a whole HTTP answer is finished by the front's one step
(``Front.finish``), so it equals the local result for every finishing option, sample for sample
(as 16-bit WAV); its job is built by the local backend (``Synthesizer.jobs``)."""

from __future__ import annotations

import pytest

pytest.importorskip("aiohttp")
try:  # the HTTP client the openai SDK itself depends on (httpx2 in newer releases)
    import httpx2 as httpx
except ImportError:
    httpx = pytest.importorskip("httpx")

from conftest import served  # noqa: E402
from fish_core.audio import formats  # noqa: E402

TEXT = "Hello there. [pause:300ms] How are you today?"
FAST = {"seed": 5, "max_new_tokens": 8}
# Every finishing option the HTTP door declares, alone and together (pause tags in the text).
OPTIONS = [{}, {"speed": 1.25}, {"loudness": -20.0}, {"speed": 0.8, "loudness": -23.0}]


def needs(options: dict) -> None:
    if "speed" in options:
        pytest.importorskip("pedalboard")
    if "loudness" in options:
        pytest.importorskip("pyloudnorm")


@pytest.fixture(scope="module")
def server(tiny_synth, tmp_path_factory):
    voices = tmp_path_factory.mktemp("voices")
    with served(tiny_synth, voices) as running:
        yield running


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "+".join(o) or "plain")
def test_a_whole_answer_is_the_local_result(tiny_synth, server, options):
    needs(options)
    local = tiny_synth.tts(TEXT, **FAST, **options)
    expected = formats.encode(local.waveform, local.sample_rate, "wav")
    for path, body in (("/v1/audio/speech", {"input": TEXT, "response_format": "wav"}),
                       ("/v1/tts", {"text": TEXT, "format": "wav"})):
        answer = httpx.post(server.url + path, json={**body, **FAST, **options}, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.content == expected, (path, options)


def test_the_local_backend_builds_the_services_job(tiny_synth):
    """One builder: the job of a request as ``render`` makes it is the service's."""
    from fish_core.speech.request import Request

    request = Request.tts(TEXT, **FAST)
    plan = tiny_synth.plan(request)
    [job] = tiny_synth.jobs(request, plan, deadline=None)
    assert (job.seed, job.params, job.batches) == (request.seed, request.sampling, plan.batches)
