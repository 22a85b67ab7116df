"""The explorer's controls as the server accepts them: what each widget offers (the choices, the
slider's positions, the largest numbers) and the check of every value a browser sends before a
command is built from it. A browser's values are never trusted: a request can carry anything, so
a name must be one of the choices (never a file: files come only through the upload buttons,
`uploads`), a number a number in range, a text no command-line option. Pure (no Dash)."""

from __future__ import annotations

import math
from typing import Any

from shardwise import presets
from shardwise.explore import state

WORKLOADS = ["train", "forward", "prefill", "decode"]
OBJECTIVES = ["time", "throughput-per-gpu"]
SCHEDULES = ["1f1b", "gpipe", "interleaved", "zb-h1"]
NETWORKS = ("ib-", "eth-", "roce-")  # the links that join servers
BANDWIDTHS_GB_S = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900]  # the slider's positions (0: none)
BLANK_MODEL = ("x-model", "w-model")  # "": the brief's 96-layer model
MAX_MAP_CELLS = 20_000  # cells of the winner map (the default grid has 832)
MAX_TEXT = 200  # characters of a text control (plans, a varied variable, a latency target)
MAX_SENT_TEXT = 10_000  # what a widget can plausibly send at all (a longer one is a forged request)
# The largest value of each number control: far beyond any page's use, and small enough that no
# request asks for a computation the time limit could not stop before it fills the memory.
MAX_NUMBER = {
    "layers": 10_000,
    "hidden": 1 << 20,
    "heads": 1 << 14,
    "batch": 1 << 20,
    "nodes": 1 << 16,
    "input": 1 << 20,
    "output": 1 << 20,
    "tp": 1 << 12,
    "pp": 1 << 12,
    "vpp": 128,
    "nics": 64,
    "concurrency": 1 << 16,
    "rate": 1e6,
}
TEXTS = ("plans", "vary", "x", "y", "ttft", "tpot")
# the name of each kind of control in a message (the command's flag where there is one)
NAMES = {
    "model": "--model",
    "layers": "--layers",
    "hidden": "--hidden",
    "heads": "--heads",
    "gpu": "--gpu",
    "links": "--intra-link",
    "link": "--intra-link",
    "bw": "the link bandwidth",
    "plans": "--plan",
    "workload": "--workload",
    "vary": "--vary",
    "x": "--vary",
    "y": "--vary",
    "batch": "--global-batch",
    "system": "--system",
    "nodes": "--nodes",
    "objective": "--objective",
    "input": "--input-len",
    "output": "--output-len",
    "ttft": "--ttft-max",
    "tpot": "--tpot-max",
    "tp": "--tp",
    "pp": "--pp",
    "vpp": "--vpp",
    "schedule": "--schedule",
    "inter": "--inter-link",
    "nics": "--nics-per-node",
    "framework": "--framework",
    "precision": "--precision",
    "weights": "--weight-precision",
    "kv": "--kv-precision",
    "concurrency": "--concurrency",
    "rate": "--request-rate",
    "engine": "--framework",
    "page": "page",
}


class ControlError(ValueError):
    """A control's value the explorer does not take; `control` is the control's id."""

    def __init__(self, control: str, message: str) -> None:
        super().__init__(message)
        self.control = control


def kind(cid: str) -> str:
    """'x-model' -> 'model' (the widget and its check follow from it)."""
    return "page" if cid == "page" else cid[2:]


def choices(cid: str) -> list[str] | None:
    """The values a choice control offers (None: not a choice)."""
    k = kind(cid)
    if k == "model":
        return ([""] if cid in BLANK_MODEL else []) + presets.names("models")
    if k in ("gpu", "system"):
        return presets.names(k + "s")
    if k in ("link", "links"):  # links inside a server: not the network cards
        return [n for n in presets.names("links") if not n.startswith(NETWORKS)]
    if k == "inter":  # "": the system's own network
        return ["", *(n for n in presets.names("links") if n.startswith(NETWORKS))]
    if k == "framework":
        return presets.names("frameworks")
    if k == "precision":
        from shardwise.precisions import TRAINING_PRECISIONS

        return list(TRAINING_PRECISIONS)
    if k in ("weights", "kv"):
        from shardwise.precisions import STORAGE_PRECISIONS

        return list(STORAGE_PRECISIONS)
    if k == "engine":  # serve --framework
        from shardwise.engines.engine_presets import ENGINES

        return list(ENGINES)
    return {"workload": WORKLOADS, "objective": OBJECTIVES, "schedule": SCHEDULES, "page": list(state.PAGES)}.get(k)


def precision_choices(cid: str, system: Any) -> tuple[list[str], str | None]:
    """The precisions a precision control offers on `system` (a preset's name) and the value that
    replaces bf16 there: none on a GPU without BF16 tensor cores (`Gpu.bf16`: V100), where the
    CLI refuses --precision bf16 and takes fp16 for the default (`requests.precision`). A training
    precision control offers only what the GPU computes in (`Gpu.peak_flops_per_s` refuses the rest:
    FP8 before Hopper, MXFP8 and NVFP4 before Blackwell); weights and KV cache keep every storage
    format (stored, then widened for the GEMMs)."""
    offered = choices(cid) or []
    try:
        gpu = presets.system(str(system)).gpu
    except Exception:  # not a preset's name: the command says so under the system's control
        return offered, None
    if kind(cid) == "precision":
        offered = [v for v in offered if _computes(gpu, v)]
    half = gpu.sixteen_bit
    if half == "bf16":
        return offered, None
    return [v for v in offered if v != "bf16"], half


def _computes(gpu: Any, precision: str) -> bool:
    """Whether `gpu`'s tensor cores take `precision` (the estimate refuses it otherwise)."""
    from shardwise.errors import SpecError

    try:
        gpu.peak_flops_per_s(precision)
    except SpecError:
        return False
    return True


def is_number_control(cid: str) -> bool:
    return kind(cid) in MAX_NUMBER


def is_whole(value: Any) -> bool:
    """An int that is not a bool (JSON's true is not a position or a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def well_formed(cid: str, value: Any) -> bool:
    """Whether `value` is of a kind the control's widget sends at all (a list of names for a
    checklist, a position for the slider, a number or a text, else a text). A value that is not is
    a forged request, refused as a whole; a value that is, but wrong, gets a message under its
    control (`check`)."""
    k = kind(cid)
    if k == "links":
        return isinstance(value, list) and len(value) <= MAX_SENT_TEXT and all(isinstance(v, str) for v in value)
    if k == "bw":
        return is_whole(value) and 0 <= value < len(BANDWIDTHS_GB_S)
    if value is None:
        return True
    if isinstance(value, str):
        return len(value) <= MAX_SENT_TEXT
    return is_number_control(cid) and isinstance(value, (int, float)) and not isinstance(value, bool)


def check(values: dict[str, Any]) -> dict[str, Any]:
    """The controls' values (as `state` holds them) if the explorer takes every one, else a
    ControlError naming the first control that it does not take, its value and what is allowed."""
    checked = {cid: _checked(cid, value) for cid, value in values.items()}
    if "x-links" in checked and not checked["x-links"] and not checked.get("x-bw"):
        # (without one the command compares its own default links, which the page does not show ticked)
        raise ControlError("x-links", f"{NAMES['links']}: tick a link, or move the bandwidth slider off 0")
    if "w-x" in checked and "w-y" in checked:
        _check_map_size(checked["w-x"], checked["w-y"])
    return checked


def _check_map_size(x: str, y: str) -> None:
    """The winner map's grid is drawn cell by cell: at most MAX_MAP_CELLS (a grid the command
    itself rejects is left to it, with its own message)."""
    from shardwise.analyses.vary import parse_vary
    from shardwise.errors import SpecError

    try:
        cells = len(parse_vary(x)[1]) * len(parse_vary(y)[1])
    except SpecError:
        return
    if cells > MAX_MAP_CELLS:
        raise ControlError(
            "w-x",
            f"--vary: the winner map draws at most {MAX_MAP_CELLS:,} cells; {x} by {y} makes {cells:,} "
            "(give fewer points, e.g. ':50')",
        )


def _checked(cid: str, value: Any) -> Any:
    k = kind(cid)
    name = NAMES.get(k, cid)
    if cid not in state.DEFAULTS:
        raise ControlError(cid, f"{cid!r} is not a control of the explorer")
    if k == "bw":
        if value not in BANDWIDTHS_GB_S or isinstance(value, bool):
            raise ControlError(cid, f"{name}: {_shown(value)} is not a position of the slider")
        return value
    if k == "links":
        return _checked_links(cid, value)
    allowed = choices(cid)
    if allowed is not None:
        if value not in allowed:
            more = " (load a model or other file with the buttons above)" if k in ("model", "gpu", "system") else ""
            raise ControlError(cid, f"{name}: {_shown(value)} is not one of the choices offered{more}")
        return value
    if is_number_control(cid):
        return _checked_number(cid, value)
    if k in TEXTS:
        return _checked_text(cid, value)
    raise ControlError(cid, f"{cid!r} is not a control of the explorer")


def _checked_links(cid: str, value: Any) -> list[str]:
    if value is None:
        return []
    allowed = choices(cid) or []
    if not isinstance(value, list):
        raise ControlError(cid, f"{NAMES['links']}: {_shown(value)} is not a list of links")
    for name in value:
        if name not in allowed:
            raise ControlError(cid, f"{NAMES['links']}: {_shown(name)} is not one of the links offered")
    return list(dict.fromkeys(value))


def _checked_number(cid: str, value: Any) -> Any:
    name, most = NAMES[kind(cid)], MAX_NUMBER[kind(cid)]
    if value is None or value == "":
        if cid in state.OPTIONAL_NUMBERS:  # blank: the model's, the system's or the command's own
            return None
        # (a browser's number box also holds nothing when what was typed is not a number)
        raise ControlError(cid, f"{name}: give a number (the box is empty, or what it holds is not a number)")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ControlError(cid, f"{name}: {_shown(value)} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ControlError(cid, f"{name}: {value} is not a finite number")
    if value > most:  # (an int of any size: JSON's are unbounded)
        raise ControlError(cid, f"{name}: {_shown(value)} is more than the explorer takes (at most {most:,})")
    return int(value) if float(value).is_integer() else value  # the command says what else is wrong


def _checked_text(cid: str, value: Any) -> str:
    name = NAMES[kind(cid)]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ControlError(cid, f"{name}: {_shown(value)} is not a text")
    if len(value) > MAX_TEXT:
        raise ControlError(cid, f"{name}: {len(value):,} characters is more than the explorer takes ({MAX_TEXT})")
    if not value.isprintable():
        raise ControlError(cid, f"{name}: {_shown(value)} holds a character that cannot be printed")
    words = value.replace(";", " ").split() if kind(cid) == "plans" else [value.strip()]
    for word in words:
        if word.startswith("-"):
            raise ControlError(cid, f"{name}: {_shown(word)} looks like a command-line option, not a value")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
