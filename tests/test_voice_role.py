"""The voice role from config, the recognizer choice, the weights check, the client commands."""

from __future__ import annotations

import hashlib

import pytest

pytest.importorskip("numpy")

from xrmq.actors.cli import build_parser
from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import decode_config
from xrmq.actors.edge.roles import resolve_role
from xrmq.actors.edge.voice_commands import run_listen, run_mic
from xrmq.actors.voice.builders import build_stt, voice_settings
from xrmq.actors.voice.stt import LiteLLMSTT, ModelIntegrityError, WhisperSTT, verify_model

from system_packages import needs_espeak, path_without


def test_voice_is_a_built_in_role():
    from xrmq.actors.edge.stack import voice_role

    assert resolve_role("voice") is voice_role


@pytest.mark.parametrize(
    "stt, kind, detail",
    [
        ("whisper", WhisperSTT, None),
        ("whisper:/models/small.en", WhisperSTT, "/models/small.en"),
        ("openai/whisper-1", LiteLLMSTT, "openai/whisper-1"),
    ],
)
def test_voice_stt_names_the_recognizer(stt, kind, detail, monkeypatch):
    monkeypatch.setenv("STT_KEY", "sk-test")
    config = decode_config(
        {"voice": {"stt": stt, "api_base": "http://127.0.0.1:9/v1", "api_key_env": "STT_KEY"}}
    )
    recognizer = build_stt(config.voice)
    assert isinstance(recognizer, kind)
    if isinstance(recognizer, WhisperSTT):
        assert (str(recognizer.model_dir) if recognizer.model_dir else None) == detail
    else:
        assert (recognizer.model, recognizer.api_base, recognizer.api_key) == (
            detail,
            "http://127.0.0.1:9/v1",
            "sk-test",
        )


def test_voice_settings_come_from_the_config():
    config = decode_config(
        {
            "voice": {
                "vad_threshold": 0.6,
                "trailing_silence_s": 0.3,
                "barge_in_min_s": 1.0,
                "barge_in_min_words": 2,
                "context_bias": False,
            }
        }
    )
    settings = voice_settings(config.voice)
    assert (settings.segmenter.threshold, settings.segmenter.trailing_silence_s) == (0.6, 0.3)
    assert (settings.gate.min_speech_s, settings.gate.min_words, settings.context_bias) == (
        1.0,
        2,
        False,
    )


@pytest.mark.parametrize(
    "key, value, rule",
    [
        ("vad_threshold", 1.5, "voice.vad_threshold: must be in (0.15, 1)"),
        ("trailing_silence_s", 0.0, "voice.trailing_silence_s: must be > 0"),
        ("barge_in_min_words", -1, "voice.barge_in_min_words: must be >= 0"),
        ("stt", " ", "voice.stt: must be"),
        ("speach_out", True, "voice.speach_out: unknown key"),
    ],
)
def test_a_broken_voice_key_is_named(key, value, rule):
    with pytest.raises(ConfigError, match=rule.replace("(", r"\(").replace(")", r"\)")):
        decode_config({"voice": {key: value}})


def test_weights_whose_hash_differs_are_refused(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"not the weights")
    with pytest.raises(ModelIntegrityError, match="refusing to load"):
        verify_model(tmp_path, "0" * 64)
    verify_model(tmp_path, hashlib.sha256(b"not the weights").hexdigest())
    with pytest.raises(ModelIntegrityError, match="missing"):
        verify_model(tmp_path / "absent", "0" * 64)


def test_a_model_dir_without_weights_is_a_clear_error(tmp_path):
    pytest.importorskip("faster_whisper")
    with pytest.raises(ValueError, match=r"WhisperSTT.model_dir: .* \(no model.bin\)"):
        WhisperSTT(tmp_path).load()


def test_the_cli_offers_mic_and_audio_listening():
    mic = build_parser().parse_args(
        ["mic", "--participant", "p1", "--wav", "a.wav", "--wav", "b.wav"]
    )
    assert mic.func is run_mic and mic.wav == ["a.wav", "b.wav"]
    listen = build_parser().parse_args(
        ["listen", "--participant", "p1", "--sink", "wav", "--wav-dir", "out"]
    )
    assert listen.func is run_listen and (listen.sink, listen.wav_dir) == ("wav", "out")
    with pytest.raises(ValueError, match="--sink wav: needs --wav-dir"):
        run_listen(build_parser().parse_args(["listen", "--sink", "wav"]))


@needs_espeak
def test_voice_tts_espeak_names_espeak_ng():
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.actors.voice.audio_sink import EspeakSynthesizer
    from xrmq.actors.voice.builders import speech_out_sink

    voice = decode_config({"voice": {"tts": "espeak"}}).voice
    synthesizer = speech_out_sink(AgentRuntime(), voice).synthesizer
    assert isinstance(synthesizer, EspeakSynthesizer)


def test_voice_tts_espeak_without_espeak_names_the_package(tmp_path, monkeypatch):
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.actors.voice.builders import speech_out_sink
    from xrmq.actors.voice.sinks import SinkUnavailableError

    monkeypatch.setenv("PATH", path_without(tmp_path, "espeak-ng"))
    voice = decode_config({"voice": {"tts": "espeak"}}).voice
    with pytest.raises(SinkUnavailableError, match="install the 'espeak-ng' package"):
        speech_out_sink(AgentRuntime(), voice)


def test_voice_tts_names_a_litellm_synthesizer():
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.actors.voice.audio_sink import LiteLLMSynthesizer
    from xrmq.actors.voice.builders import speech_out_sink

    voice = decode_config({"voice": {"tts": "openai/tts-1", "tts_voice": "nova"}}).voice
    synthesizer = speech_out_sink(AgentRuntime(), voice).synthesizer
    assert isinstance(synthesizer, LiteLLMSynthesizer)
    assert (synthesizer.model, synthesizer.voice) == ("openai/tts-1", "nova")
