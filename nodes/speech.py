"""The generating nodes: TTS, Voice Clone, Multi-Speaker and Subtitles → AUDIO (a batch of
takes), per-speaker tracks and a JSON timeline."""

from __future__ import annotations

from ..fish_core.audio.loudness import TARGET, Loudness
from ..fish_core.audio.stretch import SPEED
from ..fish_core.params import DEFAULTS, SAMPLING_RULES, SEED_RULE
from ..fish_core.speech.request import PAUSE, Request
from ..fish_core.speech.results import timeline_json
from ..fish_core.speech.settings import TAKES as TAKES_RULE
from ..fish_core.speech.words import LANGUAGES
from ..fish_core.text import script as textscript
from ..fish_core.text import srt as textsrt
from .audio import from_audio, to_audio, tracks_to_audio
from .remote import backend_accepts
from .runner import generation, require_text, typed_lexicon
from .schema import (MODEL, VOICE, WORDS, Boolean, Combo, Float, Int, Node, Output, Socket,
                     String, ruled)

SPEAKERS = 4  # fixed speaker sockets (growing inputs need a newer ComfyUI than 0.3.64)
LOUDNESS_OFF = 0.0  # the loudness widget's "off", above the targets the rule takes

MODEL_IN = Socket("model", MODEL, "The model from Sailfish Model Loader.")
# Every range below is its rule's (``ruled``: the numbers the Request checks and the docs print).
SAMPLING = [
    ruled(Int, "seed", 0, SEED_RULE,
          "Same seed + same inputs = the same audio. Each text batch uses seed + its index.",
          seed=True),
    ruled(Float, "temperature", DEFAULTS.temperature, SAMPLING_RULES["temperature"],
          "Randomness of speech: lower is steadier, higher more varied.", step=0.05),
    ruled(Float, "top_p", DEFAULTS.top_p, SAMPLING_RULES["top_p"],
          "Nucleus sampling: only the most likely tokens covering this probability.",
          step=0.01, advanced=True),
    ruled(Int, "top_k", DEFAULTS.top_k, SAMPLING_RULES["top_k"],
          "Only the k most likely tokens are sampled.", advanced=True),
    ruled(Int, "max_new_tokens", DEFAULTS.max_new_tokens, SAMPLING_RULES["max_new_tokens"],
          "Most audio frames per text batch (21.5 frames = 1 s); long text is split into "
          "batches, so this caps each batch, not the whole output.", advanced=True),
]
TAKES = ruled(Int, "takes", 1, TAKES_RULE,
              "Generate this many takes at once (seeds seed, seed+1, …) to keep the best read: "
              "the audio is a batch, one item per take, padded with silence to the longest "
              "(Save Audio writes one file per take).", optional=True)
# Finished audio (docs/finished-audio.md): optional inputs after every older one.
FINISHING = [
    ruled(Float, "loudness", LOUDNESS_OFF, TARGET,
          "Normalise to this integrated loudness in LUFS (ITU-R BS.1770-4), peaks held under "
          "-1 dBTP: -16 podcast, -23 broadcast, -14 streaming. 0: off.", step=0.5,
          optional=True, off=LOUDNESS_OFF),
    ruled(Float, "speed", 1.0, SPEED,
          "Speaking rate, pitch kept (Rubber Band; needs pedalboard): 1.25 is a quarter faster. "
          "Pauses keep their exact length.", step=0.05, optional=True),
    String("lexicon", "Pronunciation lexicon, one 'word<TAB>respelling' per line (# comments; "
           "whole words, any case). A voice's own lexicon goes over it.", multiline=True,
           optional=True, advanced=True),
]
LOUDNESS_PER = Combo("loudness_per", ["mix", "track", "line"],
                     "What loudness normalises: the mix, each speaker's track, or each line "
                     "(the speaker tracks still sum to the mix).", "mix", optional=True)
WORDS_OFF = "off"
WORDS_IN = Combo("words", [WORDS_OFF, "auto", *LANGUAGES],
                 "Time every spoken word (for captions, karaoke, lip sync) with the "
                 "Qwen3-ForcedAligner, which listens to the audio: auto (by the text's script; "
                 "another script is timed per sentence) or the language. Off: no aligner runs.",
                 WORDS_OFF, optional=True)
CHECK = Boolean("check", False,
                "Hear every take with Qwen3-ASR (downloaded on first use into the fish_speech "
                "models folder, freed with the model) and score it against the text: the "
                "timeline gives each take's error rate (words; characters for Chinese, "
                "Japanese, Korean) and the words that differ. Local models only.",
                optional=True, advanced=True)
SETTINGS = {i.id for i in (*SAMPLING, TAKES, *FINISHING, LOUDNESS_PER, WORDS_IN, CHECK)}
PAUSE_HINT = " [pause:700ms] or [pause:1.5s] inserts exactly that much silence."
AUDIO_OUT = Output("AUDIO", "audio", "44.1 kHz mono speech; with takes > 1 a batch of takes.")
TIMELINE_OUT = Output("STRING", "timeline",
                      "JSON: per take its seed and exact length, and every segment's speaker, "
                      "text, start/end (seconds and samples), frames and how it stopped.")
WORDS_OUT = Output(WORDS, "words", "The spoken words with their times on the audio's timeline "
                   "(per take; each word's speaker). Into Sailfish Captions for SRT/VTT. "
                   "Empty unless words is on.")
TAGS_HINT = ("Bracketed instructions steer delivery, e.g. [laugh], [whisper], [excited] "
             "(free-form; see the node's help).")


# ---------------------------------------------------------------- node inputs → settings
def settings(inputs: dict) -> dict:
    """The node's door: its setting inputs (``SETTINGS``) as ``Settings.of``'s keywords, which
    the request checks before the model loads. ``loudness`` 0 is off (``loudness_per`` what
    it normalises); ``lexicon`` is the text of a lexicon, typed into the node."""
    options = {k: v for k, v in inputs.items() if k in SETTINGS}
    loudness, per = options.pop("loudness", LOUDNESS_OFF), options.pop("loudness_per", "mix")
    if loudness != LOUDNESS_OFF:
        options["loudness"] = Loudness(loudness, per=per)
    lexicon = options.pop("lexicon", "")
    if isinstance(lexicon, str) and lexicon.strip():
        options["lexicon"] = typed_lexicon(lexicon)
    if options.get("speed") is None:
        options.pop("speed", None)
    if options.get("words") in (None, WORDS_OFF):
        options.pop("words", None)
    return options


def words_of(speeches) -> dict:
    """The WORDS value: per take its words (``TimedWord.as_dict``) and its segments' texts
    (what the captions show); no takes when words were not asked for."""
    return {"takes": [{"words": [w.as_dict() for w in s.words],
                       "texts": [seg.text for seg in s.segments]}
                      for s in speeches if s.words is not None]}


def tts(model, text, voice=None, **inputs):
    request = Request.tts(text, voice, accepts=backend_accepts(model),
                          **settings({"takes": 1, **inputs}))
    with generation(model) as run:
        speeches = run.speak(request)
    return to_audio(speeches), timeline_json(speeches), words_of(speeches)


def voice_clone(model, reference_audio, reference_text, text, **inputs):
    require_text("reference_text", reference_text,
                 "type the words spoken in reference_audio (cloning needs the transcript)")
    request = Request.tts(text, None, accepts=backend_accepts(model),
                          **settings({"takes": 1, **inputs}))
    reference = from_audio(reference_audio, "reference_audio")
    with generation(model) as run:
        voice = run.synth.encode_voice(**reference, text=reference_text, name="reference")
        speeches = run.speak(request.with_voices((voice,)))  # a voice encoded here
    return to_audio(speeches), timeline_json(speeches), words_of(speeches)


def multi_speaker(model, script, pause, turn_by_turn=True, **inputs):
    accepts = backend_accepts(model)
    voices = connected_speakers(inputs)
    try:
        request = Request.dialogue(script, voices, pause=pause, turn_by_turn=turn_by_turn,
                                   accepts=accepts, **settings({"takes": 1, **inputs}))
    except textscript.ScriptError as e:
        raise ValueError(script_hint(e, voices, accepts)) from None
    with generation(model) as run:
        speeches = run.speak(request)
    return (to_audio(speeches), *tracks_to_audio(speeches, SPEAKERS), timeline_json(speeches),
            words_of(speeches))


def connected_speakers(inputs: dict) -> list:
    """The voices on speaker_1 … speaker_N, which must be connected from speaker_1 on (the
    script is checked against them with the request, before the model is loaded)."""
    given = [inputs.get(f"speaker_{n}") for n in range(1, SPEAKERS + 1)]
    count = sum(v is not None for v in given)
    if any(v is None for v in given[:count]):
        gap = given.index(None) + 1
        raise ValueError(f"speaker_{gap} is not connected but a later speaker is: connect "
                         "voices to speaker_1, speaker_2, … in order")
    return given[:count]


def script_hint(error: Exception, voices: list, accepts) -> str:
    """A script that does not fit the connected voices, said with the wiring and what to do."""
    if isinstance(error, textscript.EmptyScript):
        return "script is empty: write the dialogue, one 'Name: line' per turn"
    wired = ", ".join(f"speaker_{i + 1} = {v.name}" for i, v in enumerate(voices))
    hint = ("Connect voices in speaker order, each with its own name; the model invents voices "
            "for the other speakers." if accepts.invents_voices else
            "Connect a voice for every speaker the script names, each with its own name.")
    return f"script: {error} (connected: {wired or 'none'}). {hint}"


def subtitles(model, srt, voice=None, **inputs):
    require_text("srt", srt, "paste SRT subtitles (index, 'start --> end' line, text)")
    try:
        request = Request.subtitles(srt, voice, accepts=backend_accepts(model),
                                    **settings(inputs))
    except textsrt.SubtitleError as e:
        raise ValueError(f"srt: {e}") from None
    with generation(model) as run:
        result = run.speak(request)
    report = "\n".join(result.overruns) or "Every cue fits its slot."
    return (to_audio([result]), result.srt(), report, timeline_json([result]),
            words_of([result]))


TTS = Node(
    "SailfishTTS", "Sailfish TTS",
    "Text to speech with Fish Audio S2-Pro, in a voice from Voice Encode/Load or a voice the "
    "model picks. Long text is split at sentences and spoken without seams.",
    inputs=[MODEL_IN,
            String("text", "What to say. " + TAGS_HINT + PAUSE_HINT, multiline=True),
            *SAMPLING,
            Socket("voice", VOICE, "Speak in this voice (Voice Encode or Voice Load). "
                   "Unconnected: the model picks a voice.", optional=True),
            TAKES, *FINISHING, WORDS_IN, CHECK],
    outputs=[AUDIO_OUT, TIMELINE_OUT, WORDS_OUT],
    execute=tts,
)

VOICE_CLONE = Node(
    "SailfishVoiceClone", "Sailfish Voice Clone",
    "Speaks text in the voice of a reference clip (5-30 s of clean speech works best). To "
    "reuse a voice, encode it once with Voice Encode instead.",
    inputs=[MODEL_IN,
            Socket("reference_audio", "AUDIO", "A clip of the voice to clone (any sample rate, "
                   "mono or stereo)."),
            String("reference_text", "Reference transcript: exactly the words spoken in "
                   "reference_audio.", multiline=True),
            String("text", "What to say in the cloned voice. " + TAGS_HINT, multiline=True),
            *SAMPLING,
            TAKES, *FINISHING, WORDS_IN, CHECK],
    outputs=[AUDIO_OUT, TIMELINE_OUT, WORDS_OUT],
    execute=voice_clone,
)

MULTI_SPEAKER = Node(
    "SailfishMultiSpeaker", "Sailfish Multi-Speaker",
    "A dialogue script with up to 4 voices. Lines like 'Alice: Hi!' use the voice named "
    "Alice; [speaker_1]: or <|speaker:0|> pick a voice by position. Drama 3 on a remote "
    "engine: up to 16 speakers, the model inventing voices for those without one.",
    inputs=[MODEL_IN,
            String("script", "One turn per line: 'Name: text' (the voice's name), "
                   "'[speaker_1]: text', or <|speaker:0|>text. " + TAGS_HINT, multiline=True),
            ruled(Float, "pause", 0.0, PAUSE, "Seconds of silence between turns (0: none).",
                  step=0.05),
            *SAMPLING,
            *[Socket(f"speaker_{n}", VOICE, f"Voice of speaker {n} ([speaker_{n}]:, or "
                     "'Name:' lines with this voice's name).", optional=True)
              for n in range(1, SPEAKERS + 1)],
            TAKES,
            Boolean("turn_by_turn", True,
                    "Generate each turn on its own, so the speaker tracks are exact (always so "
                    "with a pause). Off: several turns share a text batch and flow as one "
                    "conversation; such a batch goes to its first speaker's track.",
                    optional=True),
            *FINISHING, LOUDNESS_PER, WORDS_IN, CHECK],
    outputs=[AUDIO_OUT,
             *[Output("AUDIO", f"speaker_{n}", f"Speaker {n} alone: the mix's length, silent "
                      "where others talk (for lip sync); the tracks sum to the mix.")
               for n in range(1, SPEAKERS + 1)],
             TIMELINE_OUT, WORDS_OUT],
    execute=multi_speaker,
)

SUBTITLES = Node(
    "SailfishSubtitles", "Sailfish Subtitles (SRT)",
    "Speaks each SRT cue at its start time. A cue longer than its slot is kept whole and "
    "pushes later cues back; the report lists where.",
    inputs=[MODEL_IN,
            String("srt", "SRT subtitles: cue number, '00:00:01,000 --> 00:00:03,500', text.",
                   multiline=True),
            *SAMPLING,
            Socket("voice", VOICE, "Speak in this voice. Unconnected: the model picks one.",
                   optional=True),
            *FINISHING, WORDS_IN],
    outputs=[Output("AUDIO", "audio", "44.1 kHz mono speech on the subtitles' timeline."),
             Output("STRING", "srt", "SRT of where each cue really sits in the audio."),
             Output("STRING", "report", "Cues that ran over their slot or started late."),
             TIMELINE_OUT, WORDS_OUT],
    execute=subtitles,
)
