"""The explorer's controls: their defaults, the URL query string that holds them, and the command
line each page runs. Pure functions (no Dash), so they are tested on their own."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

PAGES = ("crossover", "winner-map", "planner", "serving", "timeline")
PREFIX = {"crossover": "x-", "winner-map": "w-", "planner": "p-", "serving": "s-", "timeline": "t-"}

# control id -> default. Ids start with their page's prefix; lists are links (checklists).
DEFAULTS: dict[str, object] = {
    "page": "crossover",
    # crossover: the brief's experiment by default
    "x-model": "",
    "x-layers": None,
    "x-hidden": None,
    "x-heads": None,
    "x-gpu": "a100-sxm4-80gb",
    "x-links": ["nvlink3", "pcie4"],
    "x-bw": 0,
    "x-plans": "tp=8; pp=8",
    "x-workload": "train",
    "x-vary": "batch=1..32",
    "x-batch": 8,
    # winner map
    "w-model": "",
    "w-gpu": "a100-sxm4-80gb",
    "w-link": "nvlink3",
    "w-plans": "tp=8; pp=8",
    "w-workload": "train",
    "w-x": "batch=1..64",
    "w-y": "bandwidth=4GB/s..600GB/s:x1.5",
    # planner
    "p-model": "gpt3-175b",
    "p-system": "dgx-a100",
    "p-nodes": 8,
    "p-batch": 64,
    "p-objective": "time",
    "p-inter": "",
    "p-nics": None,
    "p-framework": "megatron-core",
    "p-precision": "bf16",
    # serving
    "s-model": "llama3-70b",
    "s-system": "dgx-h100",
    "s-plans": "tp=8; tp=4,pp=2; pp=8",
    "s-input": 2048,
    "s-output": 256,
    "s-ttft": "",
    "s-tpot": "",
    "s-weights": "bf16",
    "s-kv": "bf16",
    "s-concurrency": None,
    "s-rate": None,
    "s-engine": "tensorrt-llm",
    # timeline
    "t-model": "gpt3-175b",
    "t-system": "dgx-a100",
    "t-nodes": 8,
    "t-tp": 8,
    "t-pp": 8,
    "t-vpp": 1,
    "t-batch": 16,
    "t-schedule": "1f1b",
}
IDS = tuple(DEFAULTS)
CONTROLS = {page: [c for c in IDS if c.startswith(PREFIX[page])] for page in PAGES}
# numbers whose default is none (the model's own, the system's, the command's)
OPTIONAL_NUMBERS = ("x-layers", "x-hidden", "x-heads", "p-nics", "s-concurrency", "s-rate")


def encode(values: dict[str, object]) -> str:
    """The query string of the controls that differ from their defaults ("" when none do)."""
    pairs = []
    for key, value in values.items():
        if key not in DEFAULTS or value == DEFAULTS[key] or (value in (None, "") and DEFAULTS[key] in (None, "")):
            continue
        pairs.append(
            (key, ",".join(map(str, value)) if isinstance(value, list) else "" if value is None else str(value))
        )
    return "?" + urlencode(pairs) if pairs else ""


def decode(search: str | None) -> dict[str, object]:
    """Every control's value: the query string's where it gives one, else the default. Values of
    the wrong kind are kept as text: the command then says what is wrong with them."""
    values = dict(DEFAULTS)
    for key, text in parse_qsl((search or "").lstrip("?"), keep_blank_values=True):
        if key not in DEFAULTS:
            continue
        default = DEFAULTS[key]
        if isinstance(default, list):
            values[key] = [t for t in text.split(",") if t]
        elif isinstance(default, int) or key in OPTIONAL_NUMBERS:
            values[key] = _number(text)
        else:
            values[key] = text
    if values["page"] not in PAGES:
        values["page"] = DEFAULTS["page"]
    return values


def _number(text: str) -> object:
    if text == "":
        return None
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() else number


def plans(text: str) -> list[str]:
    """'tp=8; pp=8' -> ['--plan', 'tp=8', '--plan', 'pp=8'] (plans split on ';' or spaces)."""
    out: list[str] = []
    for plan in text.replace(";", " ").split():
        out += ["--plan", plan]
    return out


def _opt(flag: str, value: object) -> list[str]:
    return [] if value in (None, "") else [flag, str(value)]


def crossover_args(v: dict[str, object]) -> list[str]:
    links: list[str] = []
    for name in v["x-links"] or []:  # type: ignore[union-attr]
        links += ["--intra-link", f"{name}={name}"]
    if v["x-bw"]:
        links += ["--intra-link", f"custom={v['x-bw']}GB/s"]
    return [
        "crossover",
        *_opt("--model", v["x-model"]),
        *_opt("--layers", v["x-layers"]),
        *_opt("--hidden", v["x-hidden"]),
        *_opt("--heads", v["x-heads"]),
        *_opt("--gpu", v["x-gpu"]),
        *links,
        *plans(str(v["x-plans"])),
        *_opt("--workload", v["x-workload"]),
        *_opt("--vary", v["x-vary"]),
        *_opt("--global-batch", v["x-batch"]),
    ]


def winner_map_args(v: dict[str, object], table: str = "grid.csv") -> list[str]:
    return [
        "sweep",
        *_opt("--model", v["w-model"]),
        *_opt("--gpu", v["w-gpu"]),
        *_opt("--intra-link", v["w-link"]),
        *plans(str(v["w-plans"])),
        *_opt("--workload", v["w-workload"]),
        *_opt("--vary", v["w-x"]),
        *_opt("--vary", v["w-y"]),
        "--csv",
        table,
        "--breakdown",
    ]


def planner_args(v: dict[str, object], table: str = "plans.csv") -> list[str]:
    return [
        "plan",
        *_opt("--model", v["p-model"]),
        *_opt("--system", v["p-system"]),
        *_opt("--nodes", v["p-nodes"]),
        *_opt("--global-batch", v["p-batch"]),
        *_opt("--objective", v["p-objective"]),
        *_opt("--inter-link", v["p-inter"]),
        *_opt("--nics-per-node", v["p-nics"]),
        *_opt("--framework", v["p-framework"] if v["p-framework"] != "megatron-core" else None),
        *_opt("--precision", v["p-precision"] if v["p-precision"] != "bf16" else None),
        "--csv",
        table,
    ]


def serving_args(v: dict[str, object]) -> list[str]:
    """The plans served as asked; the latency targets are a second command (`target_args`)."""
    return [
        "serve",
        *_opt("--model", v["s-model"]),
        *_opt("--system", v["s-system"]),
        *plans(str(v["s-plans"])),
        *_opt("--input-len", v["s-input"]),
        *_opt("--output-len", v["s-output"]),
        *_opt("--weight-precision", v["s-weights"] if v["s-weights"] != "bf16" else None),
        *_opt("--kv-precision", v["s-kv"] if v["s-kv"] != "bf16" else None),
        *_opt("--concurrency", v["s-concurrency"]),
        *_opt("--request-rate", v["s-rate"]),
        *_opt("--framework", v["s-engine"] if v["s-engine"] != "tensorrt-llm" else None),
    ]


def target_args(v: dict[str, object]) -> list[str]:
    """The latency targets (`serve --ttft-max/--tpot-max` searches for the plans that meet them)."""
    return [*_opt("--ttft-max", v["s-ttft"]), *_opt("--tpot-max", v["s-tpot"])]


def timeline_args(v: dict[str, object]) -> list[str]:
    return [
        "timeline",
        *_opt("--model", v["t-model"]),
        *_opt("--system", v["t-system"]),
        *_opt("--nodes", v["t-nodes"]),
        *_opt("--tp", v["t-tp"]),
        *_opt("--pp", v["t-pp"]),
        *_opt("--vpp", v["t-vpp"] if v["t-vpp"] != 1 else None),
        *_opt("--global-batch", v["t-batch"]),
        *_opt("--schedule", v["t-schedule"]),
    ]


def with_files(args: list[str], model_file: str | None, calibration: str | None) -> list[str]:
    """A page's command with an uploaded model (config.json or YAML: it replaces the model chosen)
    and calibration file."""
    out = list(args)
    if model_file:
        if "--model" in out:
            out[out.index("--model") + 1] = model_file
        else:
            out[1:1] = ["--model", model_file]
    if calibration:
        out += ["--calibration", calibration]
    return out
