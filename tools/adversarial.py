"""Adversarial pass over shardwise (issue 11: no traceback, no silent NaN, no hang, no lost file).

Generates a few thousand hostile or careless inputs, deterministically (fixed seed), and runs them
in-process in a small pool of worker processes, each under a memory limit (RLIMIT_AS, 4 GiB) and a
per-case timeout (signal.alarm inside the worker, a kill from this process if the worker does not
answer), then prints a table of outcomes:

- CLI cases: every command (predict, plan, timeline, serve, crossover, sweep, sensitivity, scenario,
  validate, presets), one flag mutated at a time with hostile values, random combinations of
  mutations, the grammars of --plan / --intra-link / --vary / --stage-layers / --memory-headroom,
  output files (missing or read-only directories, a directory as target, an existing file that must
  survive a failed run) and the reproductions of issue 11;
- YAML files for every file flag (--model, --gpu, --system, --intra-link, --inter-link,
  --framework, and a Hugging Face config.json for --model): binary, UTF-16, Latin-1, .inf / .nan /
  null / booleans / huge ints / negative numbers / strings in numeric fields, misspelled and
  duplicate keys, a small alias bomb, deep nesting, a FIFO, a directory;
- API calls: every public constructor (Model, Gpu, Link, Cluster, Plan, Scenario, ServingWorkload)
  with wrong types and values, and what an accepted value does to an estimate downstream.

The contract checked: exit 0 with finite, non-negative, physically bounded results (0 < MFU <= the
GPU's matmul efficiency), or exit 2 with exactly one stderr line starting `error:` (lines starting
`note:` are tolerated) that names the flag or the value; never a traceback, never more than the
timeout. Constructors raise `SpecError` naming the field, nothing else, and refuse nonsense.

    python tools/adversarial.py              # the full pass: 12,000 cases, 4-9 min on 2 cores
    python tools/adversarial.py --quick      # a deterministic ~1/8 subset, 15 s per case (under 1-2 min)
    python tools/adversarial.py --details    # one example per failing category
    python tools/adversarial.py --json out.json

Exit status: 0 when every case meets the contract, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import queue
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

SEED = 11
TIMEOUT_S = 60
QUICK_TIMEOUT_S = 15
MEMORY_LIMIT_BYTES = 4 * 2**30
GRACE_S = 20  # on top of the timeout before the worker is killed from outside
RECYCLE_EVERY = 400  # cases per worker before a fresh one (bounded state and memory)
RECYCLE_VM_BYTES = 1.5 * 2**30  # a worker that has grown past this is replaced before its next case

# ---------------------------------------------------------------------------------------------
# outcome categories
# ---------------------------------------------------------------------------------------------

OK = "ok: exit 0, results valid"
CLEAN = "clean error: exit 2, one line"
TRACEBACK = "traceback (uncaught exception)"
MEMORY = "memory > 4 GiB (MemoryError)"
TIMEOUT = "> timeout (hang or too slow)"
CRASH = "worker died (signal or hard crash)"
ACCEPTED = "bad input accepted (exit 0)"
REFUSED = "valid input refused (exit 2)"
WRONG_EXIT = "wrong exit status (not 0 or 2)"
BAD_NUMBERS = "exit 0 with NaN/inf/negative/MFU > efficiency"
BAD_JSON = "exit 0 with unreadable --json output"
WARNING = "exit 0 with a Python warning on stderr"
MULTILINE = "multi-line or malformed error (exit 2)"
VAGUE = "error names neither the flag nor the value"
LOST_FILE = "lost, damaged or stray file"

A_OK = "ok: accepted"
A_CLEAN = "clean SpecError naming the field"
A_NONAME = "SpecError that does not name the field"
A_WRONG = "wrong exception type (not SpecError)"
A_NONSENSE = "nonsense accepted silently"
A_REFUSED = "valid value refused"
A_DOWNSTREAM = "accepted, then fails or gives NaN downstream"

CLI_ORDER = [
    OK,
    CLEAN,
    TRACEBACK,
    ACCEPTED,
    WRONG_EXIT,
    REFUSED,
    BAD_NUMBERS,
    BAD_JSON,
    WARNING,
    TIMEOUT,
    MEMORY,
    CRASH,
    MULTILINE,
    VAGUE,
    LOST_FILE,
]
API_ORDER = [A_OK, A_CLEAN, A_WRONG, A_NONSENSE, A_REFUSED, A_NONAME, A_DOWNSTREAM, TIMEOUT, MEMORY, CRASH]
PASSING = {OK, CLEAN, A_OK, A_CLEAN}


@dataclass
class Case:
    kind: str  # "cli", "yaml" or "api"
    group: str  # what was varied, e.g. "predict --global-batch" or "api Plan.sequence_parallel"
    argv: list[str] = field(default_factory=list)  # "{tmp}" is replaced by the case's directory
    files: dict[str, bytes | str] = field(default_factory=dict)  # "<dir>" / "<fifo>" make those
    expect: str = "either"  # "valid" (must exit 0), "invalid" (must exit 2) or "either"
    flag: str = ""  # the flag (or field) that was mutated: the error should name it ...
    value: str = ""  # ... or this value
    outputs: tuple[str, ...] = ()  # files that must exist (non-empty) after exit 0
    sentinels: tuple[str, ...] = ()  # pre-made files that a failed run must leave untouched
    api: tuple[str, str, str] | None = None  # (constructor, field, value label)

    def shown(self) -> str:
        if self.kind == "api":
            ctor, fld, label = self.api or ("", "", "")
            return f"{ctor}(..., {fld}={label})"
        short = [a if len(a) <= 80 else f"{a[:40]}...({len(a)} chars)" for a in self.argv]
        text = "shardwise " + shlex.join(short)
        for name, content in self.files.items():
            blob = content if isinstance(content, str) else content[:70]
            text += f"\n      with {{tmp}}/{name} = {blob!r}{'...' if len(content) > 70 else ''}"
        return text


# ---------------------------------------------------------------------------------------------
# value pools
# ---------------------------------------------------------------------------------------------

V, I, E = "valid", "invalid", "either"


def pool(invalid: str = "", either: str = "", sep: str = "|") -> list[tuple[str, str]]:
    """Values and what they must do: `invalid` must be refused (exit 2), `either` may go either way
    (both `sep`-separated; an empty item is the empty string)."""
    out = [(v, I) for v in invalid.split(sep)] if invalid else []
    return out + ([(v, E) for v in either.split(sep)] if either else [])


INT_VALUES = pool(
    "0|-1|-8|1.5|abc|| |²|9223372036854775808|18446744073709551616|-9223372036854775809|nan|inf|None|true|"
    + "1"
    + "0" * 40,  # ² (superscript two) is isdigit() but not int()
    "8.0|1e3|0x10|٣|８|+8| 8 |1_000|2147483648|9223372036854775807|1|2|3|7|16|128|100000|1000000",
)
# an upper bound (--max-tp, --top): a huge one means no bound and may be taken as such
BOUND_VALUES = [(v, E if re.fullmatch("[0-9]+", v) and int(v) > 0 else x) for v, x in INT_VALUES]
FLOAT_VALUES = pool("0|-1|nan|inf|-inf|1e309|abc||-0", "1e-300|1e308|0.5|1|3|1.0000001|1e9")
# "\udcff" is an undecodable argv byte as Python hands it over
NAME_VALUES = pool(
    "| |nonexistent|ñ|\udcff|../../../../etc/passwd|/etc/passwd|/dev/null|/dev/zero|{tmp}|{tmp}/missing.yaml|"
    "{tmp}/missing.json|-|" + "x" * 3000
)
LINK_VALUES = pool(
    "600|600GB|0GB/s|-600GB/s|1e309B/s|nanGB/s|infGB/s|inf|nan|0|-1|600GB/s/s|abc||nvlink9|1e400|1e-300",
    "600GB/s|1e-300B/s|600 GB/s|600gb/s|600GiB/s|600Gbps|5Tb/s|nvlink3|NVLINK3|1B/s|1e30B/s",
)
TIME_VALUES = pool("-1us|nan|nans|inf|1e400s|abc|", "2us|0|0s|2|2 us|2µs|2μs|1e-300s|100000s|1e30s")  # μ: Greek mu
HEADROOM_VALUES = pool("100%|101%|-5%|nan%|inf%|inf|nan|-8GB|1e400GB|abc||%", "10%|0|0%|99%|8GB|50 %|79GB|1000GB")
LIST_VALUES = pool("|,|0|-1|1,-1|abc|1.5|²|99999999999999999999|1e3", "1,2,|8,8|1,2,4,8,16,32,64,128,256,512,1024| 4|3")
STAGE_VALUES = pool("96|0,96|-1,97|a,b|1.5,94.5|48,48,0|1,1|²,94|99999999999999999999,1|,", "|48,48|95,1|48, 48")
PLANSPEC_VALUES = pool(
    "|,|tp=8,tp=4|tp=²|tp=٣|tp=0|tp=-1|tp=3|tp=all,pp=all|tp=8,pp=8|tp=|=8|tp|TP=8|tp=8;pp=1|tp=1e3|"
    "tp=99999999999999999999|pp=8,vpp=0|pp=8,vpp=1000|tp=8,mb=0|tp=8,zero=4|tp=8,sp=maybe|pp=8,schedule=foo|"
    "pp=8,recompute=FULL|pp=8,first=0|pp=8,first=90|foo=bar|tp=8.0|tp=+8|tp=0x8",
    "tp=all|pp=all|pp=4,vpp=2|tp=8,mb=1000000|tp=8,sp=on|pp=8,first=1,last=1|tp=8,,pp=1|tp=1|tp=2,pp=4",
)
SERVE_PLAN_VALUES = pool(
    "|tp=8,tp=4|tp=²|tp=0|tp=3|tp=16|tp=|tp=8;pp=1|tp=99999999999999999999|pp=8,first=0|pp=8,first=30|foo=bar",
    "tp=all|pp=all|pp=2,first=1|tp=2,pp=4|pp=8",
)
LINKSPEC_VALUES = pool(
    "600;nv=600;nv=nvlink3,efficiency=abc;nv=nvlink3,efficiency=0;nv=nvlink3,efficiency=2;"
    "nv=nvlink3,efficiency=nan;nv=nvlink3,latency=-1us;nv=nvlink3,latency=abc;nv=nvlink3,latency=nan;"
    "nv=nvlink3,latency=1e400s;nv=nvlink3,base_latency=inf;nv=nvlink3,foo=1;,;=;=nvlink3;nv=;x=0GB/s;"
    "x=-5GB/s;x=1e309B/s;x=nanGB/s;x=600GB;x=nvlink9;a=b=c",
    "nv=nvlink3,efficiency=1.5;nv=nvlink3,;1e-300B/s;x=1e-300B/s;x=600 GB/s;NVLINK3;x=600GB/s,latency=2us;"
    "x=600GB/s,efficiency=1;x=1e30B/s",
    sep=";",
)
VARY_VALUES = pool(
    "batch=1..100001;batch=0..8;batch=8..1;batch=1..1;batch=1..8:0;batch=1..8:1;batch=1..8:x1;batch=1..8:x0.5;"
    "batch=1..8:xnan;batch=1..8:xinf;batch=1..1e30;batch=1..8:abc;batch=;batch;=1..8;foo=1..8;batch=1.5;"
    "batch=nan;batch=inf;batch=1e400;batch=-1,2;batch=1..inf;bandwidth=1..900;bandwidth=0GB/s..1GB/s;"
    "latency=0s..1s;peak_flops=1..2;batch=²",
    "batch=1..32;batch=1..100000;batch=1..1e30:x1.0000001;batch=1,2,,3;batch=1.5..8.5;bandwidth=1GB/s..900GB/s;"
    "bandwidth=1e-300B/s..1GB/s;bandwidth=1GB/s..900GB/s:100000;latency=1us..1s;layers=1..100000;"
    "hidden=1..100000;hidden=512..16384:x2;seq_len=1..1000000:10;gpus=1..1024:x2;gpus=3;gpus=1..100000;"
    "peak_flops=1TFLOPS..1000TFLOPS;hbm_bandwidth=1TB/s..1e30TB/s;batch=٣;batch=1..8:٣",
    sep=";",
)
SWEEP_VALUES = pool("0|-8|8..1|abc||1e30|1..2:x1|8..192:1", "1..100000|8..192:24|1|1,2,3|512..16384:x2")
# values that are slow on purpose (the documented limits, huge counts): each is tried once per flag by
# the single mutations and left out of the random combinations, which would only find the same cost
SLOW_VALUES = {"1..100000", "100000", "1000000", "2147483648", "9223372036854775807", "9223372036854775808"}
SLOW_VALUES |= {f"{v}=1..100000" for v in ("batch", "layers", "hidden", "gpus")}
SLOW_VALUES |= {"bandwidth=1GB/s..900GB/s:100000", "seq_len=1..1000000:10"}
# values that cost the same as another value of the same flag (the timeline simulates every micro-batch:
# 100000 and 2**63 are kept), left out to keep the pass short
SAME_COST = {("timeline", "--global-batch"): {"1000000", "2147483648", "9223372036854775807"}}
SWITCHES = ["--json", "--no-plot"]

# ---------------------------------------------------------------------------------------------
# the commands and their flags
# ---------------------------------------------------------------------------------------------

MODEL_INT_FLAGS = ["--layers", "--hidden", "--heads", "--kv-heads", "--ffn-hidden", "--vocab", "--seq-len"]
SCENARIO_FLAGS: dict[str, list[tuple[str, str]]] = {
    **{f: INT_VALUES for f in MODEL_INT_FLAGS},
    "--gpus-per-node": INT_VALUES,
    "--nodes": INT_VALUES,
    "--num-gpus": INT_VALUES,
    "--tp": INT_VALUES,
    "--pp": INT_VALUES,
    "--dp": INT_VALUES,
    "--cp": INT_VALUES,
    "--vpp": INT_VALUES,
    "--global-batch": INT_VALUES,
    "--micro-batch": INT_VALUES,
    "--first-stage-layers": INT_VALUES,
    "--last-stage-layers": INT_VALUES,
    "--zero": [("0", E), ("3", E), ("4", I), ("-1", I), ("abc", I), ("1.0", I)],
    "--model": NAME_VALUES,
    "--system": NAME_VALUES,
    "--gpu": NAME_VALUES,
    "--framework": NAME_VALUES,
    "--intra-link": LINK_VALUES,
    "--inter-link": LINK_VALUES,
    "--nics-per-node": FLOAT_VALUES,
    "--link-latency": TIME_VALUES,
    "--stage-layers": STAGE_VALUES,
    "--family": [("gpt", E), ("llama", E), ("GPT", E), ("mamba", I), ("", I)],  # choices in any case (#36)
    "--schedule": [("gpipe", E), ("zb-h1", E), ("interleaved", E), ("1F1B", E), ("", I)],
    "--recompute": [("full", E), ("selective", E), ("none", E), ("all", I)],
    "--precision": [("fp8", E), ("fp16", E), ("fp4", I), ("BF16", E)],
}
PLAN_FLAGS: dict[str, list[tuple[str, str]]] = {
    **{f: INT_VALUES for f in MODEL_INT_FLAGS},
    "--gpus-per-node": INT_VALUES,
    "--nodes": INT_VALUES,
    "--num-gpus": INT_VALUES,
    "--global-batch": INT_VALUES,
    "--tp": LIST_VALUES,
    "--pp": LIST_VALUES,
    "--dp": LIST_VALUES,
    "--vpp": LIST_VALUES,
    "--micro-batch": LIST_VALUES,
    "--zero": pool("4|-1|0,4|abc||,|1.5|²", "0|1,2|0,1,2,3|3"),
    "--schedule": [("gpipe", E), ("1f1b,zb-h1", E), ("foo", I), ("", I), (",", I), ("1F1B", E)],
    "--recompute": [("none", E), ("full,selective", E), ("all", I), ("", I)],
    "--sequence-parallel": [("on", E), ("off", E), ("any", E), ("maybe", I)],
    "--max-tp": BOUND_VALUES,
    "--max-micro-batch": BOUND_VALUES,
    "--max-vpp": BOUND_VALUES,
    "--top": BOUND_VALUES,
    "--memory-headroom": HEADROOM_VALUES,
    "--objective": [("throughput-per-gpu", E), ("speed", I)],
    "--model": NAME_VALUES,
    "--system": NAME_VALUES,
    "--gpu": NAME_VALUES,
    "--framework": NAME_VALUES,
    "--intra-link": LINK_VALUES,
    "--inter-link": LINK_VALUES,
    "--nics-per-node": FLOAT_VALUES,
    "--link-latency": TIME_VALUES,
    "--emit": [("megatron", E), ("torchtitan", E), ("deepspeed", E), ("slurm", I)],
}
SERVE_FLAGS: dict[str, list[tuple[str, str]]] = {
    **{f: INT_VALUES for f in MODEL_INT_FLAGS},
    "--gpus-per-node": INT_VALUES,
    "--nodes": INT_VALUES,
    "--num-gpus": INT_VALUES,
    "--input-len": INT_VALUES,
    "--output-len": INT_VALUES,
    "--concurrency": INT_VALUES,
    "--first-stage-layers": INT_VALUES,
    "--last-stage-layers": INT_VALUES,
    "--plan": SERVE_PLAN_VALUES,
    "--model": NAME_VALUES,
    "--system": NAME_VALUES,
    "--gpu": NAME_VALUES,
    "--intra-link": LINK_VALUES,
    "--inter-link": LINK_VALUES,
    "--nics-per-node": FLOAT_VALUES,
    "--link-latency": TIME_VALUES,
    "--weight-precision": [("int4", E), ("fp8", E), ("int2", I)],
    "--kv-precision": [("int4", E), ("fp8", E), ("int2", I)],
    "--runtime": [("pytorch-eager", E), ("cpp-eager", E), ("jit", I)],
    "--framework": [("vllm", E), ("fastertransformer", E), ("megatron-core", I)],
}
EXPERIMENT_FLAGS: dict[str, list[tuple[str, str]]] = {
    **{f: INT_VALUES for f in MODEL_INT_FLAGS},
    "--num-gpus": INT_VALUES,
    "--gpus-per-node": INT_VALUES,
    "--global-batch": INT_VALUES,
    "--micro-batch": INT_VALUES,
    "--first-stage-layers": INT_VALUES,
    "--last-stage-layers": INT_VALUES,
    "--model": NAME_VALUES,
    "--gpu": NAME_VALUES,
    "--framework": NAME_VALUES,
    "--inter-link": LINK_VALUES,
    "--intra-link": LINKSPEC_VALUES,
    "--plan": PLANSPEC_VALUES,
    "--workload": [("forward", E), ("prefill", E), ("decode", E), ("serve", I)],
    "--cost-model": [("textbook", E), ("exact", I)],
    "--recompute": [("full", E), ("selective", E), ("all", I)],
    "--precision": [("fp8", E), ("fp16", E), ("fp4", I)],
}
CROSSOVER_FLAGS = {**EXPERIMENT_FLAGS, "--vary": VARY_VALUES}
SWEEP_FLAGS = {**EXPERIMENT_FLAGS, "--vary": VARY_VALUES}
SENSITIVITY_FLAGS = {
    **EXPERIMENT_FLAGS,
    "--layers-values": SWEEP_VALUES,
    "--hidden-values": SWEEP_VALUES,
    "--max-batch": INT_VALUES,
    "--factor": FLOAT_VALUES,
}

PREDICT = ["predict", "--model", "gpt3-175b", "--system", "dgx-a100", "--nodes", "8", "--tp", "8", "--pp", "8"]
PREDICT += ["--global-batch", "64"]
TIMELINE = ["timeline", "--model", "gpt3-175b", "--system", "dgx-a100", "--nodes", "2", "--tp", "8", "--pp", "2"]
TIMELINE += ["--global-batch", "16", "--no-plot"]
PLAN = ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--top", "2"]
SERVE = ["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--plan", "tp=8"]
CROSSOVER = ["crossover", "--no-plot"]
SWEEP = ["sweep", "--vary", "batch=1..8"]
SENSITIVITY = ["sensitivity", "--no-plot", "--layers-values", "8..32:4", "--hidden-values", "1024..4096:x2"]

COMMANDS: dict[str, tuple[list[str], dict[str, list[tuple[str, str]]], bool]] = {
    # name: (a valid base command, its flags and values, whether --json is available)
    "predict": (PREDICT, SCENARIO_FLAGS, True),
    "timeline": (TIMELINE, SCENARIO_FLAGS, True),
    "plan": (PLAN, PLAN_FLAGS, True),
    "serve": (SERVE, SERVE_FLAGS, True),
    "crossover": (CROSSOVER, CROSSOVER_FLAGS, True),
    "sweep": (SWEEP, SWEEP_FLAGS, True),
    "sensitivity": (SENSITIVITY, SENSITIVITY_FLAGS, True),
}


def with_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """argv with `flag` set to `value` (replacing the base's value), or added as a switch."""
    out = list(argv)
    if value is not None and flag in out:
        i = out.index(flag)
        if i + 1 < len(out):
            out[i + 1] = value
            return out
    return [*out, flag] if value is None else [*out, flag, value]


# ---------------------------------------------------------------------------------------------
# case generators
# ---------------------------------------------------------------------------------------------


def reproductions() -> list[Case]:
    """The inputs named in issue 11, with what they must do."""
    R = []

    def add(argv: list[str], expect: str, flag: str = "", value: str = "", **kw: Any) -> None:
        R.append(Case("cli", "issue 11 reproductions", argv, expect=expect, flag=flag, value=value, **kw))

    gb63 = "9223372036854775808"
    add(["predict", "--model", "gpt3-175b", "--system", "dgx-a100", "--pp", "8", "--global-batch", gb63], I, "", gb63)
    add(["predict", "--model", "gpt3-175b", "--system", "dgx-a100", "--pp", "8", "--global-batch", gb63, "--json"], I)
    add(["plan", "--model", "gpt3-175b", "--system", "dgx-a100", "--global-batch", "1000000000000"], E)
    add(["crossover", "--no-plot", "--intra-link", "nv=nvlink3,efficiency=abc"], I, "efficiency", "abc")
    add(["crossover", "--no-plot", "--plan", "tp=²"], I, "--plan", "²")
    add(["crossover", "--no-plot", "--plan", ""], I, "--plan")
    add(["crossover", "--no-plot", "--plan", "tp=8,tp=4"], I, "--plan", "tp=8,tp=4")
    add(["crossover", "--no-plot", "--intra-link", "600"], I, "--intra-link", "600")
    add(["sensitivity", "--no-plot", "--plan", "tp=3", "--plan", "pp=8"], I, "--plan", "tp=3")
    add(["sweep", "--plan", "tp=3", "--vary", "batch=1..8"], I, "--plan", "tp=3")
    add(["sweep", "--plan", "tp=3"], I, "--vary")
    # issue 10: serve computes the valid plans and reports an invalid one ("not computed"), exit 0
    add(
        ["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--plan", "tp=8", "--plan", "tp=3"],
        V,
        "--plan",
        "tp=3",
    )
    add(["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--plan", "tp=3"], I, "--plan", "tp=3")
    add(["crossover", "--no-plot", "--intra-link", "x=1e-300B/s"], E, "--intra-link", "1e-300")
    add(["predict", "--model", "gpt3-175b", "--system", "dgx-a100", "--intra-link", "1e-300B/s", "--tp", "8"], E)
    R[-1].argv += ["--global-batch", "8", "--json"]
    add(["predict", "--layers", "1", "--hidden", "64", "--heads", "1", "--gpu", "a100-sxm4-80gb", "--num-gpus", "1"], V)
    R[-1].argv += ["--global-batch", "1", "--json"]
    add(["serve", "--layers", "1", "--hidden", "64", "--heads", "1", "--gpu", "a100-sxm4-80gb", "--num-gpus", "1"], V)
    R[-1].argv += ["--json"]
    add(
        ["timeline", "--layers", "1", "--hidden", "64", "--heads", "1", "--gpu", "a100-sxm4-80gb", "--num-gpus", "1"], V
    )
    R[-1].argv += ["--global-batch", "1", "--no-plot", "--json"]
    mfu = ["predict", "--model", "gpt3-175b", "--system", "dgx-a100", "--seq-len", "1000000", "--tp", "8"]
    add([*mfu, "--global-batch", "8", "--json"], E)
    add([*mfu, "--global-batch", "8"], E)
    tl = ["timeline", "--model", "gpt-1t", "--system", "dgx-a100", "--nodes", "8", "--pp", "64"]
    add([*tl, "--global-batch", "100000", "--no-plot"], E)
    add(["sensitivity", "--no-plot", "--layers-values", "1..100000"], E)
    add(["sensitivity", "--no-plot", "--max-batch", "1000000000"], E)
    add(["crossover", "--no-plot", "--vary", "batch=1..100000", "--all-rows"], E)
    add(["sweep", "--vary", "batch=1..100000", "--vary", "layers=1..100000"], E)
    add(["sweep", "--vary", "batch=1..100000", "--vary", "layers=1..100000", "--vary", "hidden=1..100000"], E)
    return R


def cli_mutations() -> list[Case]:
    """Every flag of every command, one hostile value at a time (and the base command itself)."""
    out = []
    for name, (base, flags, has_json) in COMMANDS.items():
        out.append(Case("cli", f"{name} (base)", list(base), expect=V))
        if has_json:
            out.append(Case("cli", f"{name} (base)", [*base, "--json"], expect=V))
        for flag, values in flags.items():
            skip = SAME_COST.get((name, flag), set())
            for k, (value, expect) in enumerate([ve for ve in values if ve[0] not in skip]):
                argv = with_flag(base, flag, value)
                if has_json and k % 2 == 0:
                    argv.append("--json")
                out.append(Case("cli", f"{name} {flag}", argv, expect=expect, flag=flag, value=value))
    for extra in (["--help"], ["--version"], [], ["nope"], ["predict", "--nope"], ["predict", "extra-arg"]):
        expect = V if extra in (["--help"], ["--version"]) else E
        out.append(Case("cli", "top level", extra, expect=expect))
    for name in ("predict", "plan", "timeline", "serve", "crossover", "sweep", "sensitivity"):
        out.append(Case("cli", "top level", [name, "--help"], expect=V))
    # scenario, validate, presets: their few arguments
    for args, expect in (
        (["scenario", "--no-plot"], V),
        (["scenario", "--no-plot", "--json", "all"], V),
        (["scenario", "--no-plot", "nope"], I),
        (["scenario", "--no-plot", ""], I),
        (["scenario", "--no-plot", "small-batch", "small-batch"], E),
        (["scenario", "--out-dir", "{tmp}/missing", "small-batch"], I),
        (["scenario", "--out-dir", "{tmp}/f.txt", "small-batch"], I),
        (["scenario", "--out-dir", "/proc", "small-batch"], I),
        (["validate", "narayanan21_table1"], V),
        (["validate", "--json", "korthikanti22_table4"], V),
        (["validate", "--markdown", "inference"], V),
        (["validate", "nope"], I),
        (["validate", "--rows", "all", "narayanan21_table1"], I),  # refused since walkthrough8
        (["validate", "--rows", "some"], I),
        (["presets"], V),
        (["presets", "--json"], V),
        (["presets", "gpus"], V),
        (["presets", "nope"], I),
        (["presets", "show", "dgx-a100"], V),
        (["presets", "show", "nope"], I),
        (["presets", "show"], I),
        (["presets", "show", ""], I),
        (["presets", "show", "a100-sxm4-80gb", "--json"], V),
        (["presets", "gpus", "extra"], E),
        (["presets", "show", "x" * 3000], I),
        (["presets", "show", "\udcff"], I),
    ):
        files = {"f.txt": b"x"} if "{tmp}/f.txt" in args else {}
        out.append(Case("cli", f"{args[0]} arguments", args, files=files, expect=expect))
    return out


# flags that take no hostile value worth trying (switches and outputs have their own cases)
UNPROBED = {
    "--json",
    "--help",
    "--plot",
    "--no-plot",
    "--csv",
    "--trace",
    "--out-dir",
    "--plot-prefix",
    "-o",
    "--output",
}


def _introspected_values(opt: Any) -> list[tuple[str, str]]:
    """Hostile values for an option by its click type: junk must be refused, anything numeric
    may go either way (the contract still holds: no traceback, NaN, hang or second line)."""
    import click

    kind = opt.type
    if isinstance(kind, click.Choice):
        first = str(kind.choices[0])
        return [("", I), ("zzz-not-a-choice", I), (first.upper(), E), (first, E)]
    if isinstance(kind, (click.types.IntParamType, click.IntRange)):
        huge = "1000000000|1000000000000|2147483648|9223372036854775807|99999999999999999999|0|-1|1|7"
        return pool("abc||1.5|nan|inf|²", huge)
    if isinstance(kind, (click.types.FloatParamType, click.FloatRange)):
        return pool("abc||nan|inf|-inf|1e309", "0|-1|1e-300|1e308|1e9|0.5")
    if isinstance(kind, click.types.StringParamType):
        return pool("", "|nonexistent|" + "x" * 3000 + "|\udcff|1e309|-1")
    return []


def cli_introspected() -> list[Case]:
    """Every option of every command that the hand-written tables above do not list, found by
    walking the click commands, with hostile values by its type: a flag added later is probed too."""
    import click

    from shardwise.cli import cli as group

    ctx = click.Context(group)
    out = []
    for name, (base, flags, has_json) in COMMANDS.items():
        command = group.get_command(ctx, name)
        for opt in command.params:
            if not isinstance(opt, click.Option) or opt.is_flag or opt.count:
                continue
            flag = max(opt.opts, key=len)
            if flag in flags or flag in UNPROBED or any(o in UNPROBED for o in opt.opts):
                continue
            for k, (value, expect) in enumerate(_introspected_values(opt)):
                argv = with_flag(base, flag, value)
                if has_json and k % 2 == 0:
                    argv.append("--json")
                out.append(Case("cli", f"{name} {flag} (introspected)", argv, expect=expect, flag=flag, value=value))
    return out


def cli_random(rng: random.Random, n: int) -> list[Case]:
    """Random combinations of 2-4 mutations on a random command."""
    out = []
    names = list(COMMANDS)
    for _ in range(n):
        name = rng.choice(names)
        base, flags, has_json = COMMANDS[name]
        argv, flag_names, expects = list(base), list(flags), {}
        for _ in range(rng.randint(2, 4)):
            flag = rng.choice(flag_names)
            value, exp = rng.choice([(v, x) for v, x in flags[flag] if v not in SLOW_VALUES])
            argv = with_flag(argv, flag, value)
            expects[flag] = exp  # a flag given twice: the second value is the one used
        expect = I if I in expects.values() else E
        if has_json and rng.random() < 0.5:
            argv.append("--json")
        out.append(Case("cli", f"{name} (random combination)", argv, expect=expect))
    return out


def cli_plausible(rng: random.Random, n: int) -> list[Case]:
    """Careless but plausible inputs: random model shapes, layouts and batches on real systems,
    where a clean refusal or a valid result are both fine but the numbers must be bounded."""
    out = []
    systems = ["dgx-a100", "dgx-h100", "a100-pcie-8x", "rtx4090-8x"]
    models = ["gpt3-175b", "llama3-8b", "llama3-70b", "gpt-1t", "gpt-1.7b", "llama2-7b"]
    for _ in range(n):
        cmd = rng.choice(["predict", "predict", "timeline", "serve", "plan"])
        argv = [cmd, "--model", rng.choice(models), "--system", rng.choice(systems)]
        argv += ["--nodes", str(rng.choice([1, 1, 2, 4, 16]))]
        if rng.random() < 0.5:
            argv += ["--seq-len", str(rng.choice([1, 2, 128, 4096, 32768, 131072, 1000000]))]
        if rng.random() < 0.3:
            argv += ["--layers", str(rng.choice([1, 2, 3, 7, 96, 1000]))]
        if cmd in ("predict", "timeline"):
            argv += ["--tp", str(rng.choice([1, 2, 4, 8])), "--pp", str(rng.choice([1, 2, 4, 8, 16]))]
            big = 1000000 if cmd == "predict" else 100000  # the timeline simulates every micro-batch
            argv += ["--global-batch", str(rng.choice([1, 8, 64, 512, 4096, big]))]
            argv += ["--micro-batch", str(rng.choice([1, 1, 2, 4, 64]))]
            if rng.random() < 0.3:
                argv += ["--recompute", rng.choice(["full", "selective"])]
            if rng.random() < 0.3:
                argv += ["--sequence-parallel"]
            if rng.random() < 0.2:
                argv += ["--precision", "fp8"]
            if rng.random() < 0.2:
                argv += ["--cp", str(rng.choice([2, 4]))]
            if rng.random() < 0.2:
                argv += ["--zero", str(rng.choice([0, 1, 2, 3]))]
            if cmd == "predict" and rng.random() < 0.2:
                argv += ["--engine", "simulate"]
            if cmd == "timeline":
                argv += ["--no-plot"]
        elif cmd == "serve":
            argv += ["--plan", rng.choice(["tp=8", "pp=8", "tp=2,pp=4", "tp=all", "tp=1"])]
            argv += ["--concurrency", str(rng.choice([1, 32, 1024, 100000]))]
            argv += ["--input-len", str(rng.choice([1, 512, 100000])), "--output-len", str(rng.choice([1, 128, 8192]))]
            if rng.random() < 0.3:
                argv += ["--weight-precision", rng.choice(["int4", "fp8", "int8"])]
            if rng.random() < 0.2:
                argv += ["--max-throughput"]
        else:
            argv += ["--global-batch", str(rng.choice([1, 8, 64, 512, 4096])), "--top", "1"]
        argv.append("--json")
        out.append(Case("cli", f"{cmd} (plausible)", argv, expect=E))
    return out


def grammar_cases(rng: random.Random, n: int) -> list[Case]:
    """Random strings in the small languages of --plan, --intra-link and --vary."""
    keys = ["tp", "pp", "vpp", "mb", "schedule", "recompute", "sp", "zero", "first", "last", "TP", "x", ""]
    vals = ["1", "2", "8", "all", "0", "-1", "3", "²", "٣", "1e3", "on", "off", "", "1.5", "full", "gpipe", "9" * 25]
    out = []
    for _ in range(n):
        parts = [f"{rng.choice(keys)}={rng.choice(vals)}" for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.2:
            parts.append("")
        spec = ",".join(parts)
        cmd = rng.choice(["crossover", "sweep", "sensitivity"])
        argv = [*COMMANDS[cmd][0], "--plan", spec, "--plan", rng.choice(["tp=8", "pp=8", "tp=2,pp=4"])]
        out.append(Case("cli", f"{cmd} --plan grammar", argv, flag="--plan", value=spec))
    rates = ["600GB/s", "600", "1e-300B/s", "nvlink3", "pcie4", "0GB/s", "x", "", "1e30B/s", "32Gb/s"]
    extras = ["latency=2us", "latency=-1us", "latency=nan", "efficiency=0.5", "efficiency=2", "efficiency=x"]
    extras += ["base_latency=0", "foo=1", ""]
    for _ in range(n // 2):
        spec = f"{rng.choice(['a', 'NV', '', 'ü'])}={rng.choice(rates)}"
        for _ in range(rng.randint(0, 2)):
            spec += "," + rng.choice(extras)
        argv = ["crossover", "--no-plot", "--intra-link", spec]
        out.append(Case("cli", "crossover --intra-link grammar", argv, flag="--intra-link", value=spec))
    names = ["batch", "bandwidth", "latency", "layers", "hidden", "seq_len", "gpus", "peak_flops", "x"]
    ends = ["1", "8", "0", "-1", "1e30", "nan", "2GB/s", "900GB/s", "1us", "1s", "16384", "²", ""]
    tails = ["", ":0", ":1", ":2", ":41", ":100000", ":x2", ":x1", ":x0", ":xnan", ":-3", ":abc"]
    for _ in range(n // 2):
        spec = f"{rng.choice(names)}={rng.choice(ends)}..{rng.choice(ends)}{rng.choice(tails)}"
        cmd = rng.choice(["crossover", "sweep"])
        argv = ["crossover", "--no-plot", "--vary", spec] if cmd == "crossover" else ["sweep", "--vary", spec]
        out.append(Case("cli", f"{cmd} --vary grammar", argv, flag="--vary", value=spec))
    return out


def file_cases() -> list[Case]:
    """Output files: bad targets are refused in one line before any work, an existing file
    survives a failed run, a successful run leaves the file and no temporary files."""
    out = []
    writers = [
        (
            ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--top", "1"],
            "--csv",
            ".csv",
        ),
        (
            ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--top", "1"],
            "--plot",
            ".png",
        ),
        (["crossover"], "--csv", ".csv"),
        (["crossover"], "--plot", ".png"),
        (["sweep", "--vary", "batch=1..8", "--vary", "layers=8,16"], "--csv", ".csv"),
        (["sweep", "--vary", "batch=1..8", "--vary", "layers=8,16"], "--plot", ".png"),
        ([*TIMELINE[:-1]], "--trace", ".json"),
        ([*TIMELINE[:-1]], "--plot", ".png"),
        ([*SERVE], "--plot", ".png"),
    ]
    bad_plan = {"plan": ["--tp", "3"], "crossover": ["--plan", "tp=3"], "sweep": ["--plan", "tp=3"]}
    bad_plan.update({"timeline": ["--tp", "3"], "serve": ["--input-len", "0"]})  # serve computes valid plans
    for base, flag, ext in writers:
        name = base[0]
        extra = ["--no-plot"] if name in ("crossover", "timeline") and flag != "--plot" else []
        group = f"{name} {flag} target"
        targets = [
            (f"{{tmp}}/missing/out{ext}", I),
            (f"{{tmp}}/adir{ext}", I),
            (f"{{tmp}}/afile.txt/out{ext}", I),
            (f"/proc/out{ext}", I),
            ("{tmp}/out.xyz", I),
            (f"{{tmp}}/out{ext}/", E),  # pathlib drops the trailing slash
            (f"{{tmp}}/{'n' * 300}{ext}", I),
            (f"{{tmp}}/out{ext}", V),
        ]
        for target, expect in targets:
            argv = [*base, *extra, flag, target]
            files: dict[str, bytes | str] = {"afile.txt": b"x", f"adir{ext}": "<dir>"}
            outputs = (target.replace("{tmp}/", ""),) if expect == V else ()
            out.append(Case("cli", group, argv, files=files, expect=expect, flag=flag, value=target, outputs=outputs))
        # an existing file survives a failed run, is replaced by a successful one
        argv = [*base, *extra, *bad_plan[name], flag, f"{{tmp}}/keep{ext}"]
        out.append(
            Case(
                "cli",
                group,
                argv,
                files={f"keep{ext}": b"SENTINEL"},
                expect=I,
                sentinels=(f"keep{ext}",),
                flag={"plan": "--tp", "timeline": "--tp", "serve": "--input-len"}.get(name, "--plan"),
                value="0" if name == "serve" else "3",
            )
        )
        argv = [*base, *extra, flag, f"{{tmp}}/keep{ext}"]
        out.append(Case("cli", group, argv, files={f"keep{ext}": b"SENTINEL"}, expect=V, outputs=(f"keep{ext}",)))
    sens = ["sensitivity", "--layers-values", "8..32:4", "--hidden-values", "1024..4096:x2"]
    for prefix, expect in (("{tmp}/s", V), ("{tmp}/missing/s", I), ("/proc/s", I), ("{tmp}/adir/", E)):
        outputs = ("s-layers.png",) if expect == V else ()
        argv = [*sens, "--plot-prefix", prefix]
        files: dict[str, bytes | str] = {"adir": "<dir>"}
        out.append(Case("cli", "sensitivity --plot-prefix", argv, files=files, expect=expect, outputs=outputs))
    out.append(Case("cli", "crossover --csv -", ["crossover", "--no-plot", "--csv", "-"], expect=V))
    return out + input_as_output_cases()


HF_CONFIG = (
    '{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8, '
    '"num_hidden_layers": 4, "vocab_size": 32000, "max_position_embeddings": 2048}'
)
LINK_YAML = "name: mylink\nbandwidth: 600GB/s\n"
SYSTEM_YAML = "name: mysys\ngpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node_link: l.csv\n"  # read from sub/


def input_as_output_cases() -> list[Case]:
    """Review 37: an output that names an input (or a file an input names) is refused before any
    work, and the input survives byte for byte (`sentinels` compares with the file's content)."""
    files: dict[str, bytes | str] = {"m.json": HF_CONFIG, "sub/l.csv": LINK_YAML, "sub/s.yaml": SYSTEM_YAML}
    model = ["--model", "{tmp}/m.json"]
    cases = [
        (["crossover", "--no-plot", *model, "-o", "{tmp}/m.json"], "m.json", "-o"),
        (["sensitivity", "--no-plot", *model, "--layers-values", "8,16", "-o", "{tmp}/m.json"], "m.json", "-o"),
        (["sweep", *model, "--vary", "batch=1,8", "-o", "{tmp}/m.json"], "m.json", "-o"),
        (["crossover", "--no-plot", *model, "-o", "{tmp}/sub/s.yaml"], "sub/s.yaml", "-o"),
        (["timeline", *TIMELINE[1:-1], "--plot", "{tmp}/o.png", "--trace", "{tmp}/o.png"], "", "--trace"),
        # a file an input names (the system's link file): guarded when written, after the work
        (
            ["plan", *model, "--system", "{tmp}/sub/s.yaml", "--global-batch", "8", "-o", "{tmp}/sub/l.csv"],
            "sub/l.csv",
            "-o",
        ),
    ]
    out = []
    for argv, kept, flag in cases:
        sentinels = (kept,) if kept else ()
        group = f"{argv[0]} output names an input"
        out.append(Case("cli", group, argv, files=dict(files), expect=I, flag=flag, sentinels=sentinels))
    return out


# --- YAML documents -----------------------------------------------------------------------------

YAML_BASES: dict[str, dict[str, str]] = {
    "model": {"layers": "4", "hidden": "1024", "heads": "16", "vocab": "51200", "seq_len": "2048", "family": "gpt"},
    "gpu": {
        "peak_16bit": "312 TFLOPS",
        "memory": "80GB",
        "memory_bandwidth": "2039GB/s",
        "matmul_efficiency": "0.8",
        "memory_efficiency": "0.85",
        "kernel_launch": "3us",
        "sm_count": "108",
    },
    "system": {
        "gpu": "a100-sxm4-80gb",
        "gpus_per_node": "8",
        "intra_node_link": "nvlink3",
        "inter_node_link": "ib-hdr",
        "nics_per_node": "8",
    },
    "link": {"bandwidth": "300GB/s", "efficiency": "0.8", "latency": "1us", "base_latency": "20us"},
    "framework": {
        "async_tp_grad": "true",
        "tp_comm_overlap": "false",
        "overlap_grad_reduce": "true",
        "overlap_param_gather": "false",
        "grad_accumulation_fusion": "true",
        "overlap_p2p": "null",
        "pipeline_sync": "true",
        "scatter_gather": "true",
        "zero_stage": "1",
    },
}
# how each kind of file is used: (flag, argv with {file})
YAML_USES: dict[str, list[list[str]]] = {
    "model": [
        ["predict", "--model", "{file}", "--system", "dgx-a100", "--tp", "2", "--pp", "2", "--global-batch", "8"],
        ["crossover", "--no-plot", "--model", "{file}", "--plan", "tp=2", "--plan", "pp=2"],
        ["serve", "--model", "{file}", "--system", "dgx-a100", "--plan", "tp=2"],
    ],
    "gpu": [
        ["predict", "--model", "llama3-8b", "--gpu", "{file}", "--intra-link", "nvlink3", "--num-gpus", "8"],
        ["crossover", "--no-plot", "--gpu", "{file}", "--intra-link", "nvlink3"],
    ],
    "system": [["predict", "--model", "llama3-8b", "--system", "{file}", "--nodes", "2", "--tp", "8"]],
    "intra-link": [
        ["predict", "--model", "llama3-8b", "--system", "dgx-a100", "--intra-link", "{file}", "--tp", "8"],
        ["crossover", "--no-plot", "--intra-link", "L={file}"],
    ],
    "inter-link": [
        ["predict", "--model", "llama3-8b", "--system", "dgx-a100", "--nodes", "2", "--inter-link", "{file}"],
    ],
    "framework": [["predict", "--model", "llama3-8b", "--system", "dgx-a100", "--framework", "{file}", "--tp", "8"]],
}
YAML_KIND_OF_USE = {"intra-link": "link", "inter-link": "link"}
ZERO_OK_FIELDS = {"kernel_launch", "latency", "base_latency", "sm_count"}  # 0 is allowed (0 s, 0 = unknown)
YAML_FLAG_OF_USE = {"model": "--model", "gpu": "--gpu", "system": "--system", "framework": "--framework"}
YAML_FLAG_OF_USE.update({"intra-link": "--intra-link", "inter-link": "--inter-link"})

YAML_SCALARS = pool(
    ".inf|-.inf|.nan|null|~|true|false|yes|0|-1|-0.0|1e400|1.0e+400|18446744073709551616|9223372036854775808|"
    '99999999999999999999999999999|"abc"|""|[]|{}|[1, 2]|2024-01-01|"1e309B/s"|!!binary aGVsbG8=|"²"',
    '0x10|0o10|1_000|12:30|1.5|1.0e-300|"600 GB/s"|"600"|&a 4|1.2|2',  # 12:30 is YAML 1.1 sexagesimal (750)
)
MISSPELT = {
    "model": ["layer", "Layers", "hidden_size", "head", "vocabulary"],
    "gpu": ["peak16", "memory_bandwith", "matmul_eficiency", "Memory"],
    "system": ["gpus-per-node", "intra_link", "nic_per_node"],
    "link": ["bandwith", "effciency", "Latency"],
    "framework": ["zero", "async_tp_grads", "overlap_p2p_comm"],
}


def yaml_text(fields: dict[str, str], wrap: str | None = None, dup: tuple[str, str] | None = None) -> str:
    lines = [f"{k}: {v}" for k, v in fields.items()]
    if dup is not None:
        lines.append(f"{dup[0]}: {dup[1]}")
    if wrap is not None:
        return f"{wrap}:\n" + "".join(f"  {line}\n" for line in lines)
    return "".join(f"{line}\n" for line in lines)


def _yaml_case(
    use: str, k: int, content: bytes | str, expect: str, group: str, value: str = "", name: str = ""
) -> Case:
    argv_t = YAML_USES[use][k % len(YAML_USES[use])]
    kind = YAML_KIND_OF_USE.get(use, use)
    name = name or f"{kind}.yaml"
    argv = [a.replace("{file}", "{tmp}/" + name) for a in argv_t]
    if argv[0] == "predict":
        argv += ["--global-batch", "16" if "--nodes" in argv else "8"] if "--global-batch" not in argv else []
        argv += ["--json"]
    if isinstance(content, str) and content not in ("<dir>", "<fifo>"):
        content = content.encode("utf-8")
    return Case("yaml", group, argv, files={name: content}, expect=expect, flag=YAML_FLAG_OF_USE[use], value=value)


def yaml_cases(rng: random.Random) -> list[Case]:
    out = []
    for use in YAML_USES:
        kind = YAML_KIND_OF_USE.get(use, use)
        base = YAML_BASES[kind]
        k = 0
        out.append(_yaml_case(use, k, yaml_text(base), V, f"yaml {use}: valid"))
        out.append(_yaml_case(use, k + 1, yaml_text(base, wrap="mine"), V, f"yaml {use}: valid"))
        for fname in base:
            for scalar, expect in YAML_SCALARS:
                k += 1
                exp = expect
                if kind == "framework":
                    exp = E if scalar in ("true", "false", "yes", "0") else I
                    if fname == "overlap_p2p" and scalar in ("null", "~"):
                        exp = E
                    if fname == "zero_stage":
                        exp = E if scalar in ("0", "0x10", "1.5", "2") else I
                        exp = I if scalar in ("0x10", "1.5") else exp
                elif kind == "system" and fname in ("gpu", "intra_node_link", "inter_node_link"):
                    exp = I if scalar not in ("null", "~") or fname != "inter_node_link" else E
                elif fname == "family":
                    exp = I
                elif fname in ZERO_OK_FIELDS and scalar in ("0", "-0.0"):
                    exp = E
                doc = {**base, fname: scalar}
                case = _yaml_case(use, k, yaml_text(doc), exp, f"yaml {use}: {fname}", scalar)
                case.flag = f"{fname}|{case.flag}"
                out.append(case)
        for bad in MISSPELT[kind]:
            k += 1
            doc = {**base, bad: "4"}
            out.append(_yaml_case(use, k, yaml_text(doc), I, f"yaml {use}: misspelt key", bad))
        first = next(iter(base))
        out.append(_yaml_case(use, k, yaml_text(base, dup=(first, "7")), I, f"yaml {use}: duplicate key", first))
        required = list(base)[:1]
        doc = {kk: vv for kk, vv in base.items() if kk not in required}
        out.append(_yaml_case(use, k, yaml_text(doc), I, f"yaml {use}: missing field", required[0]))
        if kind in ("gpu", "link"):
            eff = "matmul_efficiency" if kind == "gpu" else "efficiency"
            for val, expect in (("1.0", E), ("1.2", I if kind == "gpu" else E), ("1.5", I if kind == "gpu" else E)):
                doc = {**base, eff: val}
                out.append(_yaml_case(use, k, yaml_text(doc), expect, f"yaml {use}: efficiency > 1", val))
            for val in ("1.6", "2", "100"):
                doc = {**base, eff: val}
                out.append(_yaml_case(use, k, yaml_text(doc), I, f"yaml {use}: efficiency > 1", val))
        # the whole file
        good = yaml_text(base)
        docs: list[tuple[str, bytes | str, str]] = [
            ("empty file", "", I),
            ("only a comment", "# nothing\n", I),
            ("a list", "- 1\n- 2\n", I),
            ("a scalar", "42\n", I),
            ("null", "null\n", I),
            ("tab indentation", "mine:\n\tlayers: 4\n", I),
            ("two documents", good + "---\n" + good, I),
            ("binary", bytes(rng.randrange(256) for _ in range(300)), I),
            ("NUL bytes", b"\x00" * 64, I),
            ("UTF-16 with BOM", good.encode("utf-16"), E),
            ("UTF-16-LE no BOM", good.encode("utf-16-le"), I),
            ("UTF-8 BOM", b"\xef\xbb\xbf" + good.encode(), E),
            ("Latin-1 comment", (good + "# caf\xe9\n").encode("latin-1"), E),
            ("Latin-1 in a value", (good + "notes: caf\xe9\n").encode("latin-1"), E),
            ("CRLF line ends", good.replace("\n", "\r\n"), E),
            ("python tag", good + "x: !!python/object/apply:os.system ['true']\n", I),
            ("set tag", good + "x: !!set {a, b}\n", I),
            ("unhashable key", good + "[a, b]: 1\n", I),
            ("null key", good + "null: 1\n", I),
            ("int key", good + "1: 1\n", I),
            ("merge key", "base: &b\n" + "".join(f"  {ln}\n" for ln in good.splitlines()) + "mine:\n  <<: *b\n", E),
            ("deep nesting", "x: " + "[" * 5000 + "]" * 5000 + "\n", I),
            ("deep mapping", "x:\n" + "".join(" " * i + "a:\n" for i in range(1, 400)), I),
            ("long string", good + "notes: " + "a" * 2_000_000 + "\n", E),
            ("alias bomb (10^5)", _alias_bomb(5, 10) + good, I),
            ("alias bomb (10^6) in a field", yaml_text({**base, first: _alias_list(6, 10)}), I),
            ("a directory", "<dir>", I),
        ]
        if use in ("model", "intra-link"):  # one read path each (presets and --intra-link LABEL=FILE)
            docs.append(("a FIFO", "<fifo>", I))
        if kind == "model":
            hf = {"num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 32000}
            hf.update({"max_position_embeddings": 2048, "model_type": "llama"})
            docs += [
                ("HF config.json", json.dumps(hf).encode(), V),
                ("HF config.json NaN", json.dumps({**hf, "hidden_size": float("nan")}).encode(), I),
                ("HF config.json Infinity", json.dumps({**hf, "num_hidden_layers": float("inf")}).encode(), I),
                ("HF config.json 1e400", json.dumps(hf).replace("1024", "1e400").encode(), I),
                ("HF config.json 10**30", json.dumps({**hf, "vocab_size": 10**30}).encode(), I),
                ("HF config.json negative", json.dumps({**hf, "num_hidden_layers": -4}).encode(), I),
                ("HF config.json 4.5", json.dumps({**hf, "num_hidden_layers": 4.5}).encode(), I),
                ("HF config.json string", json.dumps({**hf, "hidden_size": "1024"}).encode(), E),
                ("HF config.json experts", json.dumps({**hf, "num_local_experts": 8}).encode(), I),
                ("HF config.json text_config", json.dumps({"text_config": hf}).encode(), V),
                ("HF config.json text_config list", json.dumps({**hf, "text_config": [1]}).encode(), E),
                ("HF config.json deep", b"{" + b'"a":[' * 100000 + b"]" * 100000 + b"}", I),
                ("HF config.json latin-1", json.dumps({**hf, "x": "caf\xe9"}, ensure_ascii=False).encode("latin-1"), E),
                ("HF config.json dropout str", json.dumps({**hf, "attention_dropout": "x"}).encode(), I),
            ]
        for what, content, expect in docs:
            k += 1
            name = "config.json" if what.startswith("HF") else f"{kind}.yaml"
            out.append(_yaml_case(use, k, content, expect, f"yaml {use}: {what}", value=name, name=name))
    return out


def _alias_list(levels: int, width: int) -> str:
    """The same bomb inline, as one flow sequence (a field's value)."""
    items = ["&a0 [x]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "[" + ", ".join(items) + "]"


def _alias_bomb(levels: int, width: int) -> str:
    """A billion-laughs document, kept small: width ** levels references in all."""
    lines = ["a0: &a0 [x]"]
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append(f"bomb: *a{levels}")
    return "\n".join(lines) + "\n"


# --- API values --------------------------------------------------------------------------------


def _split(text: str) -> list[str]:
    return text.split("|")


API_LABELS = _split(
    "1|8|0|-1|8.0|1.5|0.5|1e-300|1e308|True|False|None|'8'|'abc'|''|'off'|'on'|'1f1b'|'full'|'bf16'|"
    "'BF16 '|'a100-sxm4-80gb'|2**31|2**63|2**64|10**400|-2**63-1|nan|inf|-inf|1+1j|8+0j|[8]|[2, 4]|()|{}|"
    "b'8'|object()|np.int64(8)|np.float64(8.0)|np.float32(nan)|np.bool_(True)|np.uint64(2**63)|"
    "np.array([])|np.array([2, 4])|np.array([[2], [4]])|np.array(['a'])|np.array([1, nan])|"
    "np.array([1.5, 2])|np.array([True])|np.array(8)|np.array([0, 8])|np.array([1+1j])|Decimal('8')|"
    "Fraction(1, 2)|Fraction(8, 1)|a Gpu|a Link|a Model"
)


def api_value(label: str, ctor: str = "", fld: str = "") -> Any:
    """The value a label stands for (made fresh each time)."""
    import decimal
    import fractions

    import numpy as np

    if label.startswith("same as "):
        return _same(label[8:], _field_base(ctor, fld))

    nan = float("nan")
    special = {
        "object()": object,
        "a Gpu": lambda: _base_objects()["gpu"],
        "a Link": lambda: _base_objects()["link"],
        "a Model": lambda: _base_objects()["model"],
        "10**400": lambda: 10**400,
        "-2**63-1": lambda: -(2**63) - 1,
    }
    if label in special:
        return special[label]()
    env = {"np": np, "nan": nan, "inf": float("inf"), "Decimal": decimal.Decimal, "Fraction": fractions.Fraction}
    return eval(label, env)  # the labels above are literals written in this file


# "same as ...": the field's own base value in another type (8 -> 8.0, np.int64(8), np.array([8, 8]), ...),
# so that what is tested is the type, not the value (other values may break a rule across fields)
SAME_NUMBER = ["same as int", "same as float", "same as np.int64", "same as np.float64", "same as 0-d array"]
SAME_NUMBER += ["same as 1-d array"]
SAME_BOOL = ["same as bool", "same as np.bool_"]
NUMERIC_TYPES = {"posint", "optposint", "nonnegint", "clusterint", "posnum", "nonnegnum", "fraction", "fraction0"}
BOOL_TYPES = {"bool", "planbool", "optbool"}
SAME_VALID = set(SAME_NUMBER)
INTS = {"1", "8", "8.0", "np.int64(8)", "np.float64(8.0)", "np.array([2, 4])", "np.array(8)", "2**31", "2**63"}
INTS |= {"2**64", "np.uint64(2**63)", "Decimal('8')", "Fraction(8, 1)", "[8]", "[2, 4]", "np.array([[2], [4]])"}
NUMS = INTS | {"0.5", "1.5", "np.array([1.5, 2])", "1e-300", "1e308", "Fraction(1, 2)"}
FIELD_RULES: dict[str, tuple[set[str], set[str]]] = {
    # field type: (labels that must be accepted, labels that may go either way); others must be refused
    "posint": (SAME_VALID, INTS),
    "optposint": (SAME_VALID | {"None"}, INTS),
    "nonnegint": (SAME_VALID, INTS | {"0", "np.array([0, 8])"}),
    "clusterint": (SAME_VALID - {"same as 1-d array"}, INTS | {"same as 1-d array"}),
    "posnum": (SAME_VALID, NUMS),
    "nonnegnum": (SAME_VALID, NUMS | {"0", "np.array([0, 8])"}),
    "fraction": (SAME_VALID, {"0.5", "1", "1.5", "1e-300", "Fraction(1, 2)", "np.array([1.5, 2])"}),
    "fraction0": (SAME_VALID, {"0", "0.5", "1", "1.5", "1e-300", "Fraction(1, 2)", "np.array([1.5, 2])"}),
    "bool": ({"True", "False", "np.bool_(True)", *SAME_BOOL}, {"1", "0"}),  # np.bool_(True) is "same as np.bool_"
    "planbool": ({"True", "False", "np.bool_(True)", "np.array([True])", *SAME_BOOL}, {"1", "0"}),
    "optbool": ({"True", "False", "np.bool_(True)", "np.array([True])", "None", *SAME_BOOL}, {"1", "0"}),
    "schedule": ({"'1f1b'", "1", "0"}, set()),
    "recompute": ({"'full'", "1", "0"}, set()),
    "precision": ({"'bf16'"}, {"'BF16 '"}),
    "storage": ({"'bf16'"}, {"'BF16 '"}),
    "runtime": (set(), set()),
    "zero": ({"0", "1"}, set()),
    "stage_layers": ({"None", "[2, 4]", "np.array([2, 4])"}, set()),
    "str": ({"'8'", "'abc'", "'off'", "'on'", "'1f1b'", "'full'", "'bf16'", "'BF16 '", "'a100-sxm4-80gb'"}, {"''"}),
    "gpu": ({"a Gpu"}, set()),
    "link": ({"a Link"}, set()),
    "optlink": ({"a Link", "None"}, set()),
    "model": ({"a Model"}, set()),
    "cluster": (set(), set()),
    "plan": (set(), set()),
}
# a field's base value where the constructor's default is None
FIELD_BASE = {("Model", "kv_heads"): 16, ("Model", "ffn_hidden"): 4096, ("Plan", "overlap_p2p"): False}


def _fields(text: str) -> dict[str, str]:
    return dict(item.split(":") for item in text.split())


API_FIELDS: dict[str, dict[str, str]] = {  # constructor: field: field type (FIELD_RULES)
    "Model": _fields(
        "name:str layers:posint hidden:posint heads:posint vocab:posint seq_len:posint kv_heads:optposint "
        "ffn_hidden:optposint gated_mlp:bool tied_embeddings:bool learned_positions:bool bias:bool "
        "rmsnorm:bool dropout:bool notes:str"
    ),
    "Gpu": _fields(
        "name:str peak_flops_per_s_16bit:posnum memory_bytes:posnum memory_bandwidth_bytes_per_s:posnum "
        "peak_flops_per_s_fp8:nonnegnum matmul_efficiency:fraction memory_efficiency:fraction "
        "kernel_launch_s:nonnegnum matmul_efficiency_fp8:fraction0 sm_count:nonnegint"
    ),
    "Link": _fields(
        "name:str bandwidth_bytes_per_s:posnum latency_s:nonnegnum efficiency:fraction base_latency_s:nonnegnum"
    ),
    "Cluster": _fields(
        "name:str gpu:gpu gpus_per_node:clusterint nodes:clusterint intra_node_link:link "
        "inter_node_link:optlink notes:str"
    ),
    "Plan": _fields(
        "tp:posint pp:posint dp:posint global_batch:posint micro_batch:posint vpp:posint cp:posint "
        "schedule:schedule recompute:recompute sequence_parallel:planbool zero_stage:zero "
        "precision:precision flash_attention:planbool async_tp_grad:planbool tp_comm_overlap:planbool "
        "overlap_grad_reduce:planbool overlap_param_gather:planbool grad_accumulation_fusion:planbool "
        "overlap_p2p:optbool pipeline_sync:planbool scatter_gather:planbool first_stage_layers:nonnegint "
        "last_stage_layers:nonnegint stage_layers:stage_layers framework:str"
    ),
    "Scenario": _fields("model:model cluster:cluster plan:plan"),
    "ServingWorkload": _fields(
        "input_len:posint output_len:posint batch:posint weight_precision:storage kv_precision:storage runtime:runtime"
    ),
}


def _field_base(ctor: str, fld: str) -> Any:
    import dataclasses

    kwargs = _api_kwargs(ctor)
    if fld in kwargs:
        return kwargs[fld]
    if (ctor, fld) in FIELD_BASE:
        return FIELD_BASE[(ctor, fld)]
    return next(f.default for f in dataclasses.fields(_constructor(ctor)) if f.name == fld)


def _same(kind: str, v: Any) -> Any:
    import numpy as np

    if kind == "bool":
        return bool(v)
    if kind == "np.bool_":
        return np.bool_(v)
    return {
        "int": lambda: int(v),
        "float": lambda: float(v),
        "np.int64": lambda: np.int64(v),
        "np.float64": lambda: np.float64(v),
        "0-d array": lambda: np.array(v),
        "1-d array": lambda: np.array([v, v]),
    }[kind]()


def api_expect(ctor: str, fld: str, label: str) -> str:
    valid, either = FIELD_RULES[API_FIELDS[ctor][fld]]
    if label in valid:
        return V
    return E if label in either else I


def api_cases() -> list[Case]:
    out = []
    for ctor, fields in API_FIELDS.items():
        for fld, ftype in fields.items():
            same = SAME_NUMBER if ftype in NUMERIC_TYPES else SAME_BOOL if ftype in BOOL_TYPES else []
            if ftype.startswith("fraction") or fld in ("kernel_launch_s", "latency_s", "base_latency_s"):
                same = [x for x in same if "int" not in x]  # their base values are not whole
            for label in API_LABELS + same:
                case = Case("api", f"api {ctor}.{fld}", expect=api_expect(ctor, fld, label), flag=fld, value=label)
                case.api = (ctor, fld, label)
                out.append(case)
    return out


def build_cases(seed: int = SEED, quick: bool = False) -> list[Case]:
    rng = random.Random(seed)
    cases = reproductions()
    rest = cli_mutations()
    rest += cli_introspected()
    rest += cli_random(rng, 500)
    rest += cli_plausible(rng, 300)
    rest += grammar_cases(rng, 160)
    rest += file_cases()
    rest += yaml_cases(rng)
    rest += api_cases()
    if quick:  # a deterministic eighth, plus every file case (they exercise other code)
        rest = [c for i, c in enumerate(rest) if i % 8 == 0 or (c.kind == "cli" and "target" in c.group)]
    return cases + rest


# ---------------------------------------------------------------------------------------------
# running one case (inside a worker)
# ---------------------------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised by SIGALRM inside a case (a BaseException, so `except Exception` cannot swallow it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


def _where(exc: BaseException) -> str:
    """file:line of the innermost frame inside shardwise (else the innermost frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/shardwise/" in f.filename.replace("\\", "/")]
    f = (ours or frames or [None])[-1]
    if f is None:
        return "?"
    path = f.filename.replace("\\", "/")
    if "/shardwise/" in path:
        path = "shardwise/" + path.rsplit("/shardwise/", 1)[1]
    else:
        path = path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1] if "/" in path else path
    return f"{path}:{f.lineno} ({f.name})"


def _exc_summary(exc: BaseException) -> dict[str, str]:
    msg = str(exc).splitlines()[0][:240] if str(exc) else ""
    return {"type": type(exc).__name__, "where": _where(exc), "message": msg}


def _materialise(case: Case, tmp: str) -> None:
    for name, content in case.files.items():
        path = os.path.join(tmp, name)
        if content == "<dir>":
            os.makedirs(path, exist_ok=True)
        elif content == "<fifo>":
            os.mkfifo(path)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)  # "sub/l.yaml": its folder too
            with open(path, "wb") as fh:
                fh.write(content if isinstance(content, bytes) else content.encode())


def run_cli_case(case: Case, tmp: str, timeout: int) -> dict[str, Any]:
    from shardwise.cli import main

    _materialise(case, tmp)
    argv = [a.replace("{tmp}", tmp) for a in case.argv]
    out_b, err_b = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_b, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_b, encoding="utf-8", errors="backslashreplace", write_through=True)
    res: dict[str, Any] = {"code": None}
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("always")
            signal.alarm(timeout)
            try:
                main(argv)
                res["code"] = 0
            except SystemExit as exc:
                code = exc.code
                if code is None:
                    code = 0
                elif not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
                res["code"] = code
            except CaseTimeout:
                res["timeout"] = True
            except MemoryError as exc:
                res["memory"] = _exc_summary(exc)
            except BaseException as exc:
                res["exception"] = _exc_summary(exc)
            finally:
                signal.alarm(0)
    finally:
        os.chdir(cwd)
    with contextlib.suppress(Exception):
        out.flush()
        err.flush()
    # the case's directory (a random name: it may spell "inf") is shown as {tmp}
    res["stdout"] = out_b.getvalue().decode("utf-8", "replace").replace(tmp, "{tmp}")
    res["stderr"] = err_b.getvalue().decode("utf-8", "replace").replace(tmp, "{tmp}")
    res["files"] = _file_report(case, tmp)
    with contextlib.suppress(Exception):
        import matplotlib.pyplot as plt

        plt.close("all")
    return res


def _file_report(case: Case, tmp: str) -> dict[str, Any]:
    rep: dict[str, Any] = {"missing": [], "damaged": [], "stray": []}
    for name in case.outputs:
        p = os.path.join(tmp, name)
        if not os.path.isfile(p) or os.path.getsize(p) == 0:
            rep["missing"].append(name)
    for name in case.sentinels:
        p = os.path.join(tmp, name)
        given = case.files.get(name, b"SENTINEL")  # a pre-made input: its own content
        expected = given.encode() if isinstance(given, str) else given
        try:
            with open(p, "rb") as fh:
                if fh.read() != expected:
                    rep["damaged"].append(name)
        except OSError:
            rep["damaged"].append(name)
    known = set(case.files) | set(case.outputs)
    for name in os.listdir(tmp):
        if name not in known and name.startswith("tmp"):
            rep["stray"].append(name)
    return rep


_BASE: dict[str, Any] = {}


def _base_objects() -> dict[str, Any]:
    if not _BASE:
        from shardwise.specs import Cluster, Gpu, Link, Model, Plan

        gpu = Gpu("g", 312e12, 80e9, 2.039e12, matmul_efficiency=0.8)
        link = Link("l", 300e9)
        _BASE.update(
            model=Model("m", layers=8, hidden=1024, heads=16, vocab=51200, seq_len=2048),
            gpu=gpu,
            link=link,
            cluster=Cluster("c", gpu, 8, 1, link),
            plan=Plan(tp=2, pp=2, dp=2, global_batch=8, micro_batch=1),
        )
    return dict(_BASE)


def _api_kwargs(ctor: str) -> dict[str, Any]:
    b = _base_objects()
    return {
        "Model": {"name": "m", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 51200, "seq_len": 2048},
        "Gpu": {
            "name": "g",
            "peak_flops_per_s_16bit": 312e12,
            "memory_bytes": 80e9,
            "memory_bandwidth_bytes_per_s": 2.039e12,
            "matmul_efficiency": 0.8,
        },
        "Link": {"name": "l", "bandwidth_bytes_per_s": 300e9},
        "Cluster": {"name": "c", "gpu": b["gpu"], "gpus_per_node": 8, "nodes": 1, "intra_node_link": b["link"]},
        "Plan": {"tp": 2, "pp": 2, "dp": 2, "global_batch": 8, "micro_batch": 1},
        "Scenario": {"model": b["model"], "cluster": b["cluster"], "plan": b["plan"]},
        "ServingWorkload": {"input_len": 512, "output_len": 128, "batch": 8},
    }[ctor]


def _constructor(ctor: str) -> Any:
    import shardwise.specs as specs

    if ctor == "ServingWorkload" and not hasattr(specs, ctor):
        from shardwise.engines.serving import ServingWorkload  # where it lived before specs/serving.py

        return ServingWorkload
    return getattr(specs, ctor)


def _downstream(ctor: str, obj: Any) -> str | None:
    """Use an accepted object in an estimate: None if fine (or a SpecError), else what went wrong."""
    import numpy as np

    from shardwise.engines.training import estimate_training_step
    from shardwise.errors import SpecError
    from shardwise.specs import Cluster, Scenario

    b = _base_objects()
    try:
        if ctor == "ServingWorkload":
            from shardwise.engines.serving import estimate_serving, plan_for_serving

            scn = Scenario(b["model"], b["cluster"], plan_for_serving(tp=2, pp=2, dp=2))
            est = estimate_serving(scn, obj)
            values = {"ttft_s": est.ttft_s, "tpot_s": est.tpot_s, "throughput": est.throughput_tokens_per_s}
            bound = None
        else:
            if ctor == "Scenario":
                scn = obj
            elif ctor == "Model":
                scn = Scenario(obj, b["cluster"], b["plan"])
            elif ctor in ("Gpu", "Link"):
                key = "gpu" if ctor == "Gpu" else "intra_node_link"
                scn = Scenario(b["model"], Cluster("c", **{**_cluster_parts(b), key: obj}), b["plan"])
            elif ctor == "Cluster":
                scn = Scenario(b["model"], obj, b["plan"])
            else:
                scn = Scenario(b["model"], b["cluster"], obj)
            est = estimate_training_step(scn)
            values = {"step_time_s": est.step_time_s, "mfu": est.mfu, "memory": est.memory.total_bytes}
            gpu = scn.cluster.gpu
            bound = np.asarray(gpu.matmul_efficiency_for(scn.plan.precision), dtype=float)
    except SpecError:
        return None
    except (CaseTimeout, MemoryError):
        raise
    except BaseException as exc:
        s = _exc_summary(exc)
        return f"{s['type']} at {s['where']}: {s['message']}"
    for key, v in values.items():
        try:
            arr = np.asarray(v, dtype=float)
        except (TypeError, ValueError) as exc:
            return f"{key} is not numeric ({type(exc).__name__})"
        if not np.all(np.isfinite(arr)):
            return f"{key} is NaN or infinite"
        if np.any(arr <= 0) and key != "memory":
            return f"{key} <= 0"
        if key == "mfu" and bound is not None and bound.size and np.any(arr > np.max(bound) + 1e-9):
            return "mfu above the matmul efficiency"
    return None


def _cluster_parts(b: dict[str, Any]) -> dict[str, Any]:
    return {"gpu": b["gpu"], "gpus_per_node": 8, "nodes": 1, "intra_node_link": b["link"]}


def run_api_case(case: Case, timeout: int) -> dict[str, Any]:
    ctor, fld, label = case.api or ("", "", "")
    res: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        signal.alarm(timeout)
        try:
            from shardwise.errors import SpecError

            value = api_value(label, ctor, fld)
            try:
                obj = _constructor(ctor)(**{**_api_kwargs(ctor), fld: value})
            except SpecError as exc:
                res["spec_error"] = str(exc).splitlines()[0][:240] if str(exc) else ""
            except (CaseTimeout, MemoryError):
                raise
            except BaseException as exc:
                res["exception"] = _exc_summary(exc)
            else:
                res["accepted"] = True
                res["downstream"] = _downstream(ctor, obj)
        except CaseTimeout:
            res["timeout"] = True
        except MemoryError as exc:
            res["memory"] = _exc_summary(exc)
        finally:
            signal.alarm(0)
    return res


def run_case(case: Case, timeout: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    if case.kind == "api":
        res = run_api_case(case, timeout)
    else:
        tmp = tempfile.mkdtemp(prefix="adv-")
        try:
            res = run_cli_case(case, tmp, timeout)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    res["seconds"] = time.perf_counter() - t0
    return res


def worker(seed: int, quick: bool, timeout: int) -> None:
    """Read case indices on stdin, answer one JSON line each on the original stdout."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    with contextlib.suppress(ValueError, OSError):
        resource_limit()
    signal.signal(signal.SIGALRM, _alarm)
    import matplotlib

    matplotlib.use("Agg")
    cases = build_cases(seed, quick)
    proto.write(f"ready {fingerprint(cases)}\n")
    for line in sys.stdin:
        i = int(line)
        try:
            res = run_case(cases[i], timeout)
        except BaseException as exc:  # the harness itself must not die on one case
            res = {"harness_error": _exc_summary(exc), "seconds": 0.0}
        res["vm_bytes"] = _vm_bytes()
        proto.write(json.dumps({"i": i, **res}, default=str) + "\n")


def _vm_bytes() -> int:
    """The worker's address space now (Linux; 0 elsewhere): it is recycled when this grows."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def fingerprint(cases: list[Case]) -> str:
    """A digest of the case list: a worker must build the same list as the parent that sends it indices
    (this file edited during a run would make them differ)."""
    import hashlib

    return hashlib.sha256("\n".join(c.shown() for c in cases).encode("utf-8", "replace")).hexdigest()[:16]


def resource_limit() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


# ---------------------------------------------------------------------------------------------
# judging a result
# ---------------------------------------------------------------------------------------------

NAN_TEXT = re.compile(r"(?<![A-Za-z_])(nan|inf|infinity)(?![A-Za-z_])", re.I)
MFU_TEXT = re.compile(r"MFU\s+([0-9.]+)%")
SIGNED_KEYS = {"error", "relative", "bias", "mean_error", "signed_error", "delta", "change", "log_ratio"}
SENTINEL_KEYS = {"micro_batch", "chunk"}  # timeline operations: -1 marks the optimizer step
POSITIVE_KEYS = {"step_time_s", "ttft_s", "tpot_s", "e2e_s", "makespan_s", "closed_form_step_time_s"}


def _gpu_bound(doc: Any) -> float | None:
    """The matmul efficiency of the GPU a JSON result describes (None if it does not say)."""
    found: list[float] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if "matmul_efficiency" in x and "peak_flops_per_s_16bit" in x:
                with contextlib.suppress(TypeError, ValueError):
                    found.append(float(x["matmul_efficiency"]))
                    if float(x.get("peak_flops_per_s_fp8") or 0) > 0:
                        found.append(_fp8_efficiency(str(x.get("name", ""))))
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x[:20]:
                walk(v)

    walk(doc)
    return max(found) if found else None


def _fp8_efficiency(name: str) -> float:
    try:
        from shardwise import presets

        g = presets.gpu(name)
        return float(g.matmul_efficiency_fp8 or g.matmul_efficiency)
    except Exception:
        return 1.0


def check_json(doc: Any) -> str | None:
    """The first thing wrong with the numbers of a JSON result, or None."""
    bound = _gpu_bound(doc)
    problems: list[str] = []

    def walk(x: Any, path: str) -> None:
        if problems:
            return
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}")
        elif isinstance(x, list):
            for v in x:
                walk(v, f"{path}[]")
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            key = path.rsplit(".", 1)[-1].replace("[]", "")
            if isinstance(x, float) and not math.isfinite(x):
                problems.append(f"{x} at {path}")
            elif x < 0 and key not in SIGNED_KEYS and not (key in SENTINEL_KEYS and x == -1):
                problems.append(f"negative at {path}")
            elif key in POSITIVE_KEYS and x <= 0:
                problems.append(f"zero at {path}")
            elif key in ("mfu", "hfu") and (x <= 0 or x > (bound if bound is not None else 1.0) + 1e-9):
                problems.append(f"{key} {x:.3f} outside (0, {bound if bound is not None else 1.0}] at {path}")

    walk(doc, "")
    return problems[0] if problems else None


def check_text(text: str) -> str | None:
    m = NAN_TEXT.search(text)
    if m:
        line = next((ln for ln in text.splitlines() if m.group(0) in ln), "")
        return f"{m.group(0)!r} in the output: {line.strip()[:100]}"
    for m in MFU_TEXT.finditer(text):
        if float(m.group(1)) > 100:
            return f"MFU {m.group(1)}% > 100%"
    return None


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("note:")]


def _names_it(line: str, case: Case) -> bool:
    """Whether an error line names the flag (or field) or the value that was changed (or a piece of
    it: 'efficiency: nan' for --intra-link nv=nvlink3,efficiency=nan)."""
    low = line.lower()
    for flag in case.flag.split("|"):
        flag = flag.lstrip("-").lower()
        for cand in {flag, flag.replace("-", "_"), flag.replace("-", " "), flag.replace("_", "-")}:
            if cand and cand in low:
                return True
    value = case.value.replace("{tmp}/", "").strip().lower()
    if value and (value in low or value[:40] in low):
        return True
    pieces = [p for p in re.split(r"[,=;:/ ]+", value) if len(p) >= 2]
    return any(p in low for p in pieces)


def _checks_naming(case: Case) -> bool:
    """Only single mutations with a value that is wrong in itself are held to naming it."""
    return case.expect == I and bool(case.flag) and "random" not in case.group and "grammar" not in case.group


def judge_cli(case: Case, res: dict[str, Any]) -> tuple[str, str]:
    """(category, cause) of a CLI or YAML result."""
    if res.get("killed"):
        return (CRASH if res["killed"] == "died" else TIMEOUT), res.get("note", "")
    if res.get("timeout"):
        return TIMEOUT, "signal.alarm"
    if res.get("harness_error"):
        e = res["harness_error"]
        return TRACEBACK, f"harness: {e['type']} at {e['where']}"
    if res.get("memory"):
        e = res["memory"]
        return MEMORY, f"MemoryError at {e['where']}"
    if res.get("exception"):
        e = res["exception"]
        return TRACEBACK, f"{e['type']} at {e['where']}"
    code, out, err = res.get("code"), res.get("stdout", ""), res.get("stderr", "")
    files = res.get("files", {})
    if "Traceback (most recent call last)" in err:
        return TRACEBACK, "traceback printed on stderr"
    if code == 0:
        if case.expect == I:
            return ACCEPTED, ""
        if "--json" in case.argv and out.strip().startswith(("{", "[")):
            try:
                doc = json.loads(out)
            except ValueError:
                return BAD_JSON, "json.loads fails"
            bad = check_json(doc)
        else:
            bad = check_text(out)
        if bad:
            return BAD_NUMBERS, re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", bad)[:140]
        if files.get("missing") or files.get("stray"):
            return LOST_FILE, f"missing {files.get('missing')} stray {files.get('stray')}"
        if "Warning" in err:
            w = next((ln for ln in err.splitlines() if "Warning" in ln), "")
            return WARNING, re.sub(r":\d+:", ":N:", w.strip()[-160:])
        return OK, ""
    if code == 2:
        lines = _error_lines(err)
        if len(lines) != 1 or not lines[0].startswith("error:"):
            first = next((ln for ln in lines if not ln.startswith("error:")), lines[0] if lines else "(empty)")
            return MULTILINE, re.sub(r"\d+", "N", first.strip()[:120])
        if case.expect == V:
            return REFUSED, lines[0][:120]
        if files.get("damaged") or files.get("stray"):
            return LOST_FILE, f"damaged {files.get('damaged')} stray {files.get('stray')}"
        if _checks_naming(case) and not _names_it(lines[0], case):
            return VAGUE, re.sub(r"\d+", "N", lines[0][:120])
        return CLEAN, ""
    return WRONG_EXIT, f"exit {code}"


def judge_api(case: Case, res: dict[str, Any]) -> tuple[str, str]:
    if res.get("killed"):
        return (CRASH if res["killed"] == "died" else TIMEOUT), res.get("note", "")
    if res.get("timeout"):
        return TIMEOUT, "signal.alarm"
    if res.get("memory"):
        return MEMORY, f"MemoryError at {res['memory']['where']}"
    if res.get("harness_error"):
        e = res["harness_error"]
        return A_WRONG, f"harness: {e['type']} at {e['where']}"
    if res.get("exception"):
        e = res["exception"]
        return A_WRONG, f"{e['type']} at {e['where']}"
    if "spec_error" in res:
        if case.expect == V:
            return A_REFUSED, res["spec_error"][:120]
        if case.flag not in res["spec_error"]:
            return A_NONAME, re.sub(r"\d+", "N", res["spec_error"][:120])
        return A_CLEAN, ""
    if case.expect == I:
        return A_NONSENSE, ""
    if res.get("downstream"):
        return A_DOWNSTREAM, re.sub(r"\): .*", ")", res["downstream"])[:160]
    return A_OK, ""


# ---------------------------------------------------------------------------------------------
# the pool
# ---------------------------------------------------------------------------------------------


class Worker:
    def __init__(self, seed: int, quick: bool, timeout: int, expected: str) -> None:
        self.expected = expected
        self.args = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(seed), "--timeout"]
        self.args += [str(timeout)] + (["--quick"] if quick else [])
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.done = 0
        self.vm_bytes = 0

    def start(self) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env["MPLBACKEND"] = "Agg"
        env.pop("COLUMNS", None)
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            env=env,
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        first = self.lines.get(timeout=120)
        if first != f"ready {self.expected}":
            raise RuntimeError(f"worker did not start or built other cases (edited during the run?): {first!r}")
        self.done = 0
        self.vm_bytes = 0

    @staticmethod
    def _read(proc: subprocess.Popen[str], q: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            q.put(line.rstrip("\n"))
        q.put(None)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def run(self, i: int, deadline_s: float, fresh: bool = False) -> dict[str, Any]:
        stale = self.done >= RECYCLE_EVERY or self.vm_bytes > RECYCLE_VM_BYTES or (fresh and self.done)
        if self.proc is None or self.proc.poll() is not None or stale:
            self.stop()
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write(f"{i}\n")
            self.proc.stdin.flush()
            line = self.lines.get(timeout=deadline_s)
        except queue.Empty:
            self.stop()
            return {"killed": "timeout", "note": f"no answer in {deadline_s:.0f} s", "seconds": deadline_s}
        except (BrokenPipeError, OSError):
            line = None
        self.done += 1
        if line is None:
            rc = self.proc.wait() if self.proc else None
            self.stop()
            return {"killed": "died", "note": f"worker exit {rc}", "seconds": time.perf_counter() - t0}
        res = json.loads(line)
        self.vm_bytes = int(res.get("vm_bytes", 0))
        return res


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------

SECTIONS = [("cli", "CLI cases", CLI_ORDER), ("yaml", "YAML / JSON files", CLI_ORDER), ("api", "API calls", API_ORDER)]


def summarise(cases: list[Case], results: list[dict[str, Any]]) -> dict[str, Any]:
    counts: dict[str, Counter[str]] = {k: Counter() for k, _, _ in SECTIONS}
    causes: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, (case, res) in enumerate(zip(cases, results, strict=True)):
        cat, cause = judge_api(case, res) if case.kind == "api" else judge_cli(case, res)
        counts[case.kind][cat] += 1
        if cat not in PASSING:
            key_cause = cause if cat in (TRACEBACK, A_WRONG, MEMORY, A_DOWNSTREAM, BAD_NUMBERS) else case.group
            if cat in (MULTILINE, VAGUE, WARNING, LOST_FILE):
                key_cause = f"{case.group}: {cause}"
            causes[(case.kind if case.kind != "yaml" else "cli", cat, key_cause)].append(i)
    slow = sorted(range(len(cases)), key=lambda i: -float(results[i].get("seconds", 0)))[:10]
    by_group: Counter[str] = Counter()
    for case, res in zip(cases, results, strict=True):
        by_group[case.group.split(":")[0]] += float(res.get("seconds", 0))
    return {"counts": counts, "causes": causes, "slowest": slow, "seconds_by_group": by_group.most_common(12)}


def _first_lines(res: dict[str, Any], n: int = 3) -> list[str]:
    for key in ("exception", "memory", "harness_error"):
        if res.get(key):
            e = res[key]
            return [f"{e['type']} at {e['where']}: {e['message']}"]
    if res.get("killed") or res.get("timeout"):
        return [res.get("note", "timed out")]
    if "spec_error" in res:
        return [f"SpecError: {res['spec_error']}"]
    if res.get("downstream"):
        return [f"downstream: {res['downstream']}"]
    if res.get("accepted"):
        return ["(accepted)"]
    err = [ln for ln in res.get("stderr", "").splitlines() if ln.strip()]
    if res.get("code") == 0:
        return [f"exit 0; stdout: {ln[:110]}" for ln in res.get("stdout", "").splitlines()[:n]] + err[:1]
    return [f"exit {res.get('code')}: {ln[:150]}" for ln in err[:n]]


def report(cases: list[Case], results: list[dict[str, Any]], summary: dict[str, Any], details: bool) -> str:
    lines = []
    for kind, title, order in SECTIONS:
        c = summary["counts"][kind]
        total = sum(c.values())
        if not total:
            continue
        lines.append(f"{title} ({total:,})")
        for cat in order:
            if c.get(cat):
                mark = " " if cat in PASSING else "!"
                lines.append(f" {mark} {cat:<50} {c[cat]:>6,}")
        lines.append("")
    causes = summary["causes"]
    ranked = sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    lines.append(f"distinct failures by cause ({len(ranked)}; most frequent first)")
    for n, ((kind, cat, cause), idx) in enumerate(ranked[: 60 if details else 40], 1):
        lines.append(f"{n:3}. [{kind}] {cat}: {len(idx)} case(s)")
        lines.append(f"       cause: {cause}")
        lines.append(f"       e.g.   {cases[idx[0]].shown()}")
    if details:
        lines.append("")
        lines.append("one example per failing category")
        seen: set[tuple[str, str]] = set()
        for (kind, cat, _cause), idx in ranked:
            if (kind, cat) in seen:
                continue
            seen.add((kind, cat))
            case, res = cases[idx[0]], results[idx[0]]
            lines.append(f"- [{kind}] {cat}")
            lines.append(f"    {case.shown()}")
            for ln in _first_lines(res):
                lines.append(f"    | {ln}")
    lines.append("")
    lines.append("worker seconds by group (the most expensive)")
    for group, sec in summary["seconds_by_group"]:
        lines.append(f"  {sec:8.1f} s  {group}")
    lines.append("")
    lines.append("slowest cases")
    for i in summary["slowest"]:
        lines.append(f"  {float(results[i].get('seconds', 0)):7.2f} s  {cases[i].shown().splitlines()[0][:110]}")
    return "\n".join(lines)


def as_json(cases: list[Case], results: list[dict[str, Any]], summary: dict[str, Any], meta: dict) -> dict:
    causes = []
    for (kind, cat, cause), idx in sorted(summary["causes"].items(), key=lambda kv: -len(kv[1])):
        example = cases[idx[0]]
        causes.append(
            {
                "kind": kind,
                "category": cat,
                "cause": cause,
                "cases": len(idx),
                "example": example.shown(),
                "example_output": _first_lines(results[idx[0]]),
            }
        )
    return {
        **meta,
        "counts": {k: dict(v) for k, v in summary["counts"].items()},
        "failing": sum(n for c in summary["counts"].values() for cat, n in c.items() if cat not in PASSING),
        "causes": causes,
        "slowest": [
            {"seconds": round(float(results[i].get("seconds", 0)), 3), "case": cases[i].shown()}
            for i in summary["slowest"]
        ],
        "seconds_by_group": [{"group": g, "seconds": round(t, 1)} for g, t in summary["seconds_by_group"]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a deterministic ~1/8 subset (about a minute)")
    ap.add_argument("--details", action="store_true", help="one example per failing category")
    ap.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--timeout", type=int, help="seconds per case [60; 15 with --quick]")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes [2]")
    ap.add_argument("--only", metavar="TEXT", help="only cases whose group contains TEXT")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.timeout is None:
        args.timeout = QUICK_TIMEOUT_S if args.quick else TIMEOUT_S
    if args.worker:
        worker(args.seed, args.quick, args.timeout)
        return 0
    t0 = time.perf_counter()
    cases = build_cases(args.seed, args.quick)
    index = list(range(len(cases)))
    if args.only:
        index = [i for i, c in enumerate(cases) if args.only in c.group]
    print(f"{len(index):,} cases, {args.jobs} worker(s), {args.timeout} s per case", file=sys.stderr, flush=True)
    sub = [cases[i] for i in index]
    # the workers rebuild the full list and are sent indices into it
    results_sub = run_all_indices(cases, index, args)
    summary = summarise(sub, results_sub)
    elapsed = time.perf_counter() - t0
    print(f"timeout {args.timeout} s per case, memory limit {MEMORY_LIMIT_BYTES / 2**30:g} GiB per worker\n")
    print(report(sub, results_sub, summary, args.details))
    print(f"\n{len(sub):,} cases in {elapsed:.0f} s (seed {args.seed}{', quick' if args.quick else ''})")
    if args.json:
        meta = {"seed": args.seed, "quick": args.quick, "cases": len(sub), "elapsed_s": round(elapsed, 1)}
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(as_json(sub, results_sub, summary, meta), fh, indent=2, ensure_ascii=False)
    failing = sum(n for c in summary["counts"].values() for cat, n in c.items() if cat not in PASSING)
    return 1 if failing else 0


def run_all_indices(cases: list[Case], index: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    picked = [cases[i] for i in index]
    remap = dict(enumerate(index))
    digest = fingerprint(cases)
    results: list[dict[str, Any] | None] = [None] * len(index)
    todo: queue.Queue[int] = queue.Queue()
    order = sorted(range(len(index)), key=lambda j: (picked[j].kind == "api", picked[j].kind == "yaml"))
    for j in order:
        todo.put(j)
    lock = threading.Lock()
    count = [0]

    def loop() -> None:
        w = Worker(args.seed, args.quick, args.timeout, digest)
        try:
            while True:
                try:
                    j = todo.get_nowait()
                except queue.Empty:
                    return
                res = w.run(remap[j], args.timeout + GRACE_S)
                if (res.get("memory") or res.get("killed") == "died") and not res.get("fresh"):
                    # out of memory or dead after other cases: confirm in a fresh worker
                    res = {**w.run(remap[j], args.timeout + GRACE_S, fresh=True), "fresh": True}
                results[j] = res
                with lock:
                    count[0] += 1
                    if count[0] % 500 == 0:
                        print(f"  {count[0]:,}/{len(index):,}", file=sys.stderr, flush=True)
        finally:
            w.stop()

    threads = [threading.Thread(target=loop) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r or {"killed": "died", "note": "no result"} for r in results]


if __name__ == "__main__":
    sys.exit(main())
