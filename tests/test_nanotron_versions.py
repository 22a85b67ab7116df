"""Review 41 #6: the nanotron presets say which versions they model. Since huggingface/nanotron
7bc99232 (2025-06-23) trainer.py wraps DDP whenever dp > 1 and its fp32 hook raises
NotImplementedError under ZeRO-1, so "main of 2026 the same paths" was wrong: the source names the
versions covered and what newer main does."""

from __future__ import annotations

from shardwise import presets


def test_nanotron_source_names_the_versions_it_covers():
    source = presets.raw("frameworks")["nanotron"]["source"]
    assert "main of 2026 the same paths" not in source
    assert "c737f00f" in source and "7bc99232" in source and "NotImplementedError" in source
    assert "versions the nanotron preset covers" in presets.raw("frameworks")["nanotron-defaults"]["source"]
