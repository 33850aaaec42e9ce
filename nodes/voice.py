"""Reusable voices: encode a reference clip once, save it, load it → FISH_S2_VOICE."""

from __future__ import annotations

from ..fish_core import Voice
from . import paths
from .audio import from_audio
from .remote import RemoteHandle, engine_voice_choices
from .runner import interruptible, loaded, require_text, typed_lexicon
from .schema import MODEL, VOICE, Combo, Int, Node, Output, Socket, String


MAX_CONSENT = 1000


def voice_encode(model, audio, transcript, name, consent=""):
    require_text("name", name, "name the voice (script 'Name:' lines use it)")
    paths.check_name(name, "name")
    consent = stated_consent(consent)
    given = transcript if isinstance(transcript, str) and transcript.strip() else None
    if given is None and isinstance(model, RemoteHandle):
        require_text("transcript", transcript, "a remote engine's voice needs the words spoken "
                     "in the audio")
    with loaded(model) as synth:  # without a transcript: heard by the model's recogniser
        voice = synth.encode_voice(**from_audio(audio, "audio"), text=given, name=name.strip())
        if given is None:
            print(f"[Sailfish] voice {name.strip()!r}: transcript recognised by Qwen3-ASR "
                  f"(check it; type the right one into transcript): {voice.clips[0].text}")
        if consent and store_needs_consent(model, synth):
            voice = synth.register_voice(voice, name.strip(), consent=consent)
        return (voice,)


def stated_consent(consent) -> str:
    """The consent typed into the node ("" when none: the clip is then sent inline)."""
    if consent is None:
        return ""
    if not isinstance(consent, str) or len(consent) > MAX_CONSENT:
        raise ValueError(f"consent: expected a text of at most {MAX_CONSENT} characters (the "
                         "consent id or statement of the person whose voice this is)")
    return consent.strip()


def store_needs_consent(model, synth) -> bool:
    """Whether ``model`` is a remote engine whose voice store registers a voice only with the
    speaker's consent (SGLang-Omni, vLLM-Omni). Elsewhere a consent is not used (local models
    keep the voice's codes; other engines' stores take no consent, and the clip goes inline)."""
    return isinstance(model, RemoteHandle) and synth.dialect.needs_consent


def voice_from_take(model, audio, text, name, take=1, lexicon=""):
    """Casting: take ``take`` of an AUDIO batch (a TTS node's takes) and the text it says →
    a voice (``speech.casting``: the padding silence trimmed, tags out of the transcript)."""
    from ..fish_core.speech.casting import take_clip

    require_text("text", text, "type the text the take says (what the TTS node was given)")
    require_text("name", name, "name the voice (script 'Name:' lines use it)")
    paths.check_name(name, "name")
    wave, rate = picked_take(audio, take)
    lexicon = typed_lexicon(lexicon) if lexicon and lexicon.strip() else None
    # the lexicon respells the transcript: Cancel stops it
    clip, said, notes = interruptible(take_clip, wave, rate, text, lexicon)
    with loaded(model) as synth:
        voice = synth.encode_voice(clip, said, name=name.strip(), sample_rate=rate)
    voice.lexicon = lexicon
    report = f"{voice.name}: {clip.shape[0] / rate:.2f} s, “{said}”"
    return voice, "\n".join([report, *notes])


def picked_take(audio, take):
    """``(wave [samples], rate)``: take ``take`` of an AUDIO batch, mono, checked."""
    import torch

    from ..fish_core.speech.casting import check_rate

    given = from_audio(audio, "audio")
    waves = given["audio"]
    if not isinstance(waves, torch.Tensor) or waves.dim() != 3:
        raise ValueError("audio: expected ComfyUI AUDIO, a [batch, channels, samples] waveform")
    if not 1 <= take <= waves.shape[0]:
        raise ValueError(f"take: the audio holds {waves.shape[0]} take(s); pick 1 … "
                         f"{waves.shape[0]}, got {take}")
    rate = check_rate(given["sample_rate"], "audio")  # names the input, never a ZeroDivision
    return waves[take - 1].float().mean(dim=0), rate  # [samples], mono


def engine_voice(model, voice):
    """One of a remote engine's own voices, by name (checked against its voice list now)."""
    if not isinstance(model, RemoteHandle):
        raise ValueError("model: Engine Voice names a voice kept by a remote engine; connect a "
                         "Model Loader in remote mode (for a local model use Voice Load)")
    require_text("voice", voice, "pick or type the name of one of the engine's voices")
    with loaded(model) as synth:
        return (synth.engine_voice(voice.strip()),)


def validate_engine_voice(voice=""):
    """Any name passes ComfyUI's check (the list is what the engines had when it was made; the
    voice is checked against the model's engine when the node runs)."""
    if not isinstance(voice, str) or len(voice) > MAX_ENGINE_VOICE:
        return f"voice: expected a voice name of at most {MAX_ENGINE_VOICE} characters"
    return True


MAX_ENGINE_VOICE = 128


def voice_save(voice, filename_prefix):
    path = voice.save(paths.new_voice_path(filename_prefix))
    return (paths.voice_name(path),)


def voice_load(voice):
    return (Voice.load(paths.resolve_voice(voice)),)


def voice_fingerprint(voice, **_):
    """Re-run Voice Load when the file changes."""
    try:
        stat = paths.resolve_voice(voice).stat()
    except FileNotFoundError:
        return ""
    return f"{stat.st_mtime_ns}:{stat.st_size}"


VOICE_ENCODE = Node(
    "SailfishVoiceEncode", "Sailfish Voice Encode",
    "Encodes a reference clip and its transcript into a reusable voice for TTS, "
    "Multi-Speaker and Subtitles (and for Voice Save).",
    inputs=[Socket("model", MODEL, "The model from Sailfish Model Loader (its codec encodes "
                   "the clip)."),
            Socket("audio", "AUDIO", "A clip of the voice: 5-30 s of clean speech, any sample "
                   "rate, mono or stereo."),
            String("transcript", "Exactly the words spoken in the audio. Empty: heard by "
                   "Qwen3-ASR (downloaded on first use into the fish_speech models folder; "
                   "printed in the console; a recognised transcript can be wrong: type the "
                   "right one here to correct it).", multiline=True),
            String("name", "The voice's name: Multi-Speaker script lines 'Name: …' use it.",
                   "speaker"),
            String("consent", "Remote engines with a consent-checked voice store (SGLang-Omni, "
                   "vLLM-Omni) only: the consent id or statement of the person whose voice "
                   "this is. Given: the voice is registered once in the engine's store under "
                   "its name (letters, digits, _ . -; pick one unique on that engine) and "
                   "requests name it. Empty: the clip is sent with every request. Sailfish "
                   "never states consent for you. Ignored (no error) for a local model and "
                   "other engines.", optional=True)],
    outputs=[Output(VOICE, "voice", "The encoded voice.")],
    execute=voice_encode,
)

ENGINE_VOICE = Node(
    "SailfishEngineVoice", "Sailfish Engine Voice",
    "A voice the remote engine keeps (registered there with a consent, or built in), by name: "
    "for TTS, Multi-Speaker and Subtitles on that engine.",
    inputs=[Socket("model", MODEL, "The remote model from Sailfish Model Loader (remote mode)."),
            Combo("voice", engine_voice_choices, "The engine's voice: the list offers the "
                  "voices of the configured engines (as they were when the node list loaded); "
                  "a name the model's engine does not have is an error listing its voices.")],
    outputs=[Output(VOICE, "voice", "The engine's voice, named in each request.")],
    execute=engine_voice,
    validate=validate_engine_voice,
)

VOICE_FROM_TAKE = Node(
    "SailfishVoiceFromTake", "Sailfish Voice From Take",
    "Casting: keeps a generated take as a voice. Generate takes with no voice, pick the best, "
    "connect the audio and the text it says here, then save or use the voice.",
    inputs=[Socket("model", MODEL, "The model from Sailfish Model Loader (its codec encodes "
                   "the take)."),
            Socket("audio", "AUDIO", "The takes (a TTS node's audio; a batch of takes or one)."),
            String("text", "The text the take says: what the TTS node was given. Pause and "
                   "speaker tags are taken out.", multiline=True),
            String("name", "The voice's name: Multi-Speaker script lines 'Name: …' use it.",
                   "cast"),
            Int("take", 1, 1, 8, "Which take of the batch to keep (1 = the first).",
                optional=True),
            String("lexicon", "The lexicon the take was made with, if any: kept in the voice "
                   "(one 'word<TAB>respelling' per line).", multiline=True, optional=True,
                   advanced=True)],
    outputs=[Output(VOICE, "voice", "The cast voice (save it with Voice Save)."),
             Output("STRING", "report", "How long the kept speech is, and what it says.")],
    execute=voice_from_take,
)

VOICE_SAVE = Node(
    "SailfishVoiceSave", "Sailfish Voice Save",
    "Saves a voice as .safetensors into models/fish_speech_voices, where Voice Load finds it.",
    inputs=[Socket("voice", VOICE, "The voice to save."),
            String("filename_prefix", "File name (may include sub-folders) inside "
                   "models/fish_speech_voices; a number is appended.", "sailfish/voice")],
    outputs=[Output("STRING", "file", "The saved file, as Voice Load lists it.")],
    execute=voice_save,
    output_node=True,
)

VOICE_LOAD = Node(
    "SailfishVoiceLoad", "Sailfish Voice Load",
    "Loads a voice saved by Voice Save (or the Sailfish CLI) from models/fish_speech_voices.",
    inputs=[Combo("voice", paths.voice_choices, "A .safetensors voice file from "
                  "models/fish_speech_voices.")],
    outputs=[Output(VOICE, "voice", "The loaded voice.")],
    execute=voice_load,
    fingerprint=voice_fingerprint,
)
