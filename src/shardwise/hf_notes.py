"""Which of a Hugging Face config's notes apply to the command reading it (`hf_config.note_seq_len`):
serve prices the config's whole context window (`Model.serving_context`), so the note on the
training sequence length's cap at `hf_config.MAX_SEQ_LEN` does not apply there (a Qwen3-32B
config.json printed "sequence length 32768: the config's context window of 40960 tokens capped at
32768" in serve, whose launch uses 40,960; review 50 #12)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# the words of the note on a context window capped at MAX_SEQ_LEN (`hf_config.seq_len_assumption`;
# tests/test_serve_notes_r50.py checks they are its)
CAPPED_WORDS = "tokens capped at"
_SERVING: ContextVar[bool] = ContextVar("shardwise_hf_serving", default=False)


def skipped(note: str) -> bool:
    """Whether `note` does not apply to the command reading the config: the training cap's, in serve."""
    return _SERVING.get() and CAPPED_WORDS in note


@contextmanager
def serving_notes() -> Iterator[None]:
    """Within: a config read for serving, its notes without the training cap's."""
    token = _SERVING.set(True)
    try:
        yield
    finally:
        _SERVING.reset(token)
