"""`shardwise.allocator`: the `shardwise` command keeps freed array memory for reuse (glibc),
leaves a user's own malloc settings alone, and changes no result."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from shardwise.allocator import reuse_freed_memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def test_the_users_own_malloc_settings_win(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    assert reuse_freed_memory() is False


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt only")
def test_glibc_takes_the_settings():
    assert reuse_freed_memory() is True


MODES = ("reuse", "default")


def test_the_results_do_not_depend_on_the_allocator():
    code = (
        "import sys; from shardwise.allocator import reuse_freed_memory\n"
        "if sys.argv[1] == 'reuse': reuse_freed_memory()\n"
        "import numpy as np; from shardwise import presets; from shardwise.specs import Plan, Scenario\n"
        "from shardwise.engines.training import estimate_training_step\n"
        "b = np.arange(1, 600000) % 97 + 1\n"
        "plan = Plan(tp=4, pp=2, dp=2, global_batch=2 * b)\n"
        "scn = Scenario(presets.model('llama3-8b'), presets.system('dgx-a100', nodes=2), plan)\n"
        "print(float(np.sum(estimate_training_step(scn).step_time_s)).hex())\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code, m], capture_output=True, text=True, check=True) for m in MODES]
    assert runs[0].stdout == runs[1].stdout != ""
