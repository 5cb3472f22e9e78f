"""Whisper with its audio context fitted to the utterance: a few seconds cost a few seconds.

Whisper's encoder is built for 30 s windows, and faster-whisper pads every input to 30 s:
recognizing a 1 s question costs as much encoder work as 30 s of speech, which on a
small CPU is most of the recognition time (tiny.en int8: ~1 s of a loaded core for a
1.5 s question, against ~0.1 s when only the question's own frames are encoded).
CTranslate2's Whisper encoder accepts fewer frames, so ``recognize_fitted`` encodes the
utterance's log-mel frames plus ``PAD_S`` of silence, and decodes greedily (or with the
recognizer's beam) with the same prompt layout faster-whisper uses (``<|startofprev|>``,
the prompt's last tokens, the start-of-transcript sequence, ``<|notimestamps|>``).

Guards, as faster-whisper's own: a decode that repeats itself (zlib compression ratio
above ``MAX_COMPRESSION``, or the same sentence twice in a row) or an utterance longer
than the 30 s window returns None, so the caller recognizes it the padded way; a decode
the model thinks is no speech (no-speech probability above 0.6 with an average
log-probability below -1) is empty.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np

PAD_S = 5.0
"""Silence encoded after the utterance. Whisper was trained on 30 s windows that mostly
end in silence: with less than a few seconds of it after the speech (0.2 s, 1 s, 3 s
tried on espeak-ng questions) it often says the last sentence again or runs on."""
MAX_COMPRESSION = 2.4
_SENTENCE = re.compile(r"(?<=[.?!])\s+")
_NORMAL = re.compile(r"[^a-z0-9']+")
MAX_FRAMES = 3000
"""30 s of 10 ms log-mel frames: Whisper's whole window."""
_RATE = 16000


def recognize_fitted(
    model: Any, audio: np.ndarray, prompt: str | None, *, language: str, beam_size: int
) -> str | None:
    """The text of ``audio`` (16 kHz mono float32) from faster-whisper ``model``'s Whisper,
    encoding only the audio's frames; None when the padded way must decide (see above)."""
    import ctranslate2
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_compression_ratio, get_suppressed_tokens

    padded = np.concatenate(
        [audio.astype(np.float32, copy=False), np.zeros(round(PAD_S * _RATE), np.float32)]
    )
    features = model.feature_extractor(padded)
    frames = features.shape[-1] - features.shape[-1] % 2
    if frames > MAX_FRAMES or frames < 2:
        return None
    encoded = model.model.encode(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None, :, :frames])),
        to_cpu=False,
    )
    tokenizer = Tokenizer(
        model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language
    )
    previous = tokenizer.encode(" " + prompt.strip()) if prompt and prompt.strip() else []
    tokens = model.get_prompt(tokenizer, previous, without_timestamps=True)
    seconds = audio.size / _RATE
    result = model.model.generate(
        encoded,
        [tokens],
        beam_size=beam_size,
        max_length=min(model.max_length, len(tokens) + 16 + round(12 * seconds)),
        return_scores=True,
        return_no_speech_prob=True,
        suppress_blank=True,
        suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
    )[0]
    ids = [token for token in result.sequences_ids[0] if token < tokenizer.eot]
    text = tokenizer.decode(ids).strip()
    average_logprob = result.scores[0] * len(ids) / (len(ids) + 1)
    if result.no_speech_prob > 0.6 and average_logprob < -1.0:
        return ""
    if text and (get_compression_ratio(text) > MAX_COMPRESSION or says_twice(text)):
        return None
    return text


def says_twice(text: str) -> bool:
    """Whether ``text`` has the same sentence twice in a row (Whisper running on)."""
    sentences = [_NORMAL.sub(" ", part.lower()).strip() for part in _SENTENCE.split(text)]
    return any(a and a == b for a, b in itertools.pairwise(sentences))
