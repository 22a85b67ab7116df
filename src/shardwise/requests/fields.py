"""The words a user gives for one training scenario -- a model, a cluster, a parallel plan and the
software stack -- as one table of fields with one set of defaults.

Every face reads this table: the command line's flags carry these defaults (`cli/options.py`),
a CSV row, a dict, a YAML mapping or the explorer's controls are parsed by `parse_value`, and a
request turns back into a command line (`to_argv`) or a CSV row (`to_row`) from it. Nothing here
imports numpy or click, so the CLI can read the defaults while it builds `--help`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardwise.errors import SpecError
from shardwise.precisions import FP8_RECIPES
from shardwise.recompute_policies import SELECTIVE_POLICIES

# `specs.plan_choices.ATTENTION_KERNELS`, spelt here: importing specs would import numpy
ATTENTION_KERNEL_CHOICES = ("fused", "flash2", "sdpa-flash2", "te-flash2", "sdpa-mem-efficient", "flash3", "flash4")

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


@dataclass(frozen=True)
class Field:
    """One field: its name in a request (and a CSV column), its flag on the command line, its
    kind (int, float, str, bool, onoff, or list: a flag given again for each value), the default,
    and the allowed values of a choice."""

    name: str
    kind: str
    default: Any = None
    choices: tuple[str, ...] = ()
    flag: str = ""  # the command-line flag: --name with dashes unless given
    dest: str = ""  # click's parameter name: the name unless given

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        return self.dest or self.name


def _f(name: str, kind: str, default: Any = None, *choices: str, flag: str = "", dest: str = "") -> Field:
    return Field(name, kind, default, tuple(choices), flag, dest)


MODEL_FIELDS = (
    _f("model", "str", flag="--model", dest="model_name"),
    _f("layers", "int"),
    _f("hidden", "int"),
    _f("heads", "int"),
    _f("kv_heads", "int"),
    _f("ffn_hidden", "int"),
    _f("vocab", "int"),
    _f("family", "str", None, "gpt", "llama"),
    _f("seq_len", "int"),
)
CLUSTER_FIELDS = (
    _f("calibration", "str"),
    _f("system", "str"),
    _f("gpu", "str", dest="gpu_name"),
    _f("gpus_per_node", "int"),
    _f("p2p", "onoff", None, "on", "off"),
    _f("nvls", "onoff", None, "on", "off"),
    _f("intra_link", "str"),
    _f("inter_link", "str"),
    _f("nics_per_node", "float"),
    _f("link_latency", "str"),
    _f("nodes", "int"),
    _f("num_gpus", "int"),
)
PLAN_FIELDS = (
    _f("tp", "int", 1),
    _f("pp", "int", 1),
    _f("dp", "int"),
    _f("cp", "int", 1),
    _f("cp_comm", "str", "p2p", "p2p", "all_gather", "a2a"),
    _f("ep", "int", 1),
    _f("etp", "int"),
    _f("expert_imbalance", "float", 1.0),
    _f("moe_dispatcher", "str", "alltoall", "alltoall", "flex", "allgather"),
    _f("moe_overlap", "bool", False),
    _f("moe_capacity_factor", "float", 0.0),  # `Plan.moe_capacity_factor` (0: dropless)
    _f("moe_pad_to_capacity", "bool", False),
    _f("vpp", "int", 1),
    _f("global_batch", "int"),
    _f("micro_batch", "int", 1),
    _f("schedule", "str", None, "gpipe", "1f1b", "interleaved", "zb-h1"),
    _f("recompute", "str", None, "none", "selective", "full"),  # None: the framework's (`default_recompute`)
    _f("recompute_layers", "int", 0),
    _f("offload_activations", "int", 0),  # layers offloaded to host memory (`Plan.offload_activation_layers`)
    _f("offload_optimizer", "float", 0.0),  # the optimizer state's share on the host CPU (`Plan.offload_optimizer`)
    _f("recompute_modules", "str"),  # Megatron-Core module names, comma-separated (`Plan.recompute_modules`)
    _f("mtp_layers", "int", 0),
    _f("cuda_graph_scope", "str"),  # Megatron-Core scope names, comma-separated (`Plan.cuda_graph_scope`)
    _f("sequence_parallel", "bool"),
    _f("zero", "int", None, "0", "1", "2", "3"),
    _f("shard_group", "int", 0),
    _f("lora_rank", "int", 0),
    _f("lora_targets", "str", "qkv,proj,fc1,fc2"),
    _f("packed_document_len", "int", 0),
    _f("pipeline_flushes", "int", 1),
    _f("first_stage_layers", "int"),
    _f("last_stage_layers", "int"),
    _f("stage_layers", "str"),
)
EXECUTION_FIELDS = (
    _f("framework", "str", "megatron-core"),
    _f("precision", "str"),  # None: bf16, fp16 on a GPU without BF16 (`requests.precision`); else TRAINING_PRECISIONS
    _f("flash_attention", "bool"),  # None: the framework's (`build.flash_attention`), else on
    _f("attention_kernel", "str", None, *ATTENTION_KERNEL_CHOICES),
    _f("eager_kernels", "bool"),
    _f("fp8_recipe", "str", None, *FP8_RECIPES),
    _f("selective_policy", "str", None, *SELECTIVE_POLICIES),
    _f("async_tp_grad", "bool"),
    _f("tp_comm_overlap", "bool"),
    _f("overlap_grad_reduce", "bool"),
    _f("overlap_param_gather", "bool"),
    _f("grad_accumulation_fusion", "bool"),
    _f("overlap_p2p", "bool"),
    _f("pipeline_sync", "bool"),
    _f("scatter_gather", "bool"),
    _f("grad_reduce_bf16", "bool"),  # None: the framework's (off: fp32 gradient buffers)
    # None: the framework's (`Plan.loss_kernel`)
    _f("loss_kernel", "str", None, "stack", "te", "eager-bf16", "eager-bf16-freed", "compiled"),
    _f("functional_a2a", "bool"),  # None: the framework's (off: torchtitan since #4085, eager a2a rerun)
    _f("scan_unpipelined", "bool"),  # None: the framework's (off: XLA's collective pipeliner or no scan)
    _f("expandable_segments", "bool"),  # None: the framework's (off: the caching allocator's split blocks)
    _f("partition_activations", "bool"),  # None: the framework's (off: DeepSpeed's whole checkpoints)
    _f("zero1_grad_all_reduce", "bool"),  # None: the framework's (off: ZeRO-1 reduce-scatters in buckets)
    _f("hf_gpt2_ops", "bool"),  # None: the framework's (off: `Plan.hf_gpt2_ops`, transformers 4.12 GPT-2)
    _f("cublas_before_11", "bool"),  # None: the framework's (off: `Plan.cublas_before_11`, CUDA 10.x cuBLAS)
    _f("optimizer_step_bytes", "float"),  # None: the framework's (0: a fused step, `Plan.optimizer_step_bytes`)
    _f("zero3_buckets", "str"),  # None: the framework's (`Plan.zero3_buckets`; "prefetch=1e7,reduce=1e7", "none")
    # None: the framework's (`Plan.fsdp2_grad_sync`; FSDP2 stacks alone: `requests.plan_build`)
    _f("fsdp2_grad_sync", "str", None, "every-micro-batch", "last-micro-batch"),
    # None: the framework's (`Plan.optimizer_state`; fp32 master and moments)
    _f(
        "optimizer_state",
        "str",
        None,
        "fp32",
        "fp32-remainders",
        "bf16",
        "fp32-bf16-moments",
        "fp32-remainders-bf16-moments",
    ),
)
TRAINING_FIELDS = (*MODEL_FIELDS, *CLUSTER_FIELDS, *PLAN_FIELDS, *EXECUTION_FIELDS)
BY_NAME = {f.name: f for f in TRAINING_FIELDS}

# `crossover`, `sweep` and `sensitivity`: plans compared on links as one variable moves. Defaults are
# the brief's experiment (`analyses.experiment.brief_experiment`: hidden 4096, 96 layers, 8 A100s,
# TP=8 against PP=8, NVLink against PCIe); a field left None takes the system's or the brief's value.
EXPERIMENT_FIELDS = (
    _f("model", "str", "gpt-96l-4096h", flag="--model", dest="model_name"),
    *MODEL_FIELDS[1:],
    _f("gpu", "str", dest="gpu_name"),
    _f("system", "str"),
    _f("num_gpus", "int", dest="gpus"),
    _f("nodes", "int"),
    _f("gpus_per_node", "int"),
    _f("calibration", "str"),
    _f("inter_link", "str"),
    _f("nics_per_node", "float"),
    _f("link_latency", "str"),
    _f("intra_links", "list", (), flag="--intra-link", dest="links"),
    _f("plans", "list", (), flag="--plan"),
    _f("global_batch", "int", 8, dest="batch"),
    _f("micro_batch", "int", 1),
    _f("workload", "str", "train", "train", "forward", "prefill", "decode"),
    _f("cost_model", "str", "physical", "physical", "textbook"),
    _f("recompute", "str", None, "none", "selective", "full"),  # None: the framework's (`default_recompute`)
    _f("flash_attention", "bool"),  # None: the framework's (`build.flash_attention`), else on
    _f("precision", "str"),  # None: bf16, fp16 on a GPU without BF16 (`requests.precision`); else TRAINING_PRECISIONS
    _f("framework", "str", "megatron-core"),
    _f("first_stage_layers", "int"),
    _f("last_stage_layers", "int"),
    _f("ignore_memory", "bool", False),
)


def spellings(table: tuple[Field, ...]) -> dict[str, Field]:
    """Every spelling a mapping may use for a field of `table`: its name, its click name, its flag
    without dashes (with dashes or underscores)."""
    return {
        **{f.name: f for f in table},
        **{f.key: f for f in table},
        **{f.option[2:]: f for f in table},
        **{f.option[2:].replace("-", "_"): f for f in table},
    }


SPELLINGS = spellings(TRAINING_FIELDS)


def values_of(data: Any, table: tuple[Field, ...], where: str = "") -> dict[str, Any]:
    """Field values (by name) from a dict, a CSV row, a YAML mapping or the explorer's controls:
    keys are any of a field's spellings (`num_gpus`, `num-gpus`, `--num-gpus`); an unknown key
    is an error naming the closest field."""
    spelled = SPELLINGS if table is TRAINING_FIELDS else spellings(table)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).strip().lstrip("-")
        f = spelled.get(name) or spelled.get(name.replace("-", "_"))
        if f is None:
            raise unknown_field(str(key), where, table)
        out[f.name] = parse_value(f, value, where)
    return out


def by_name(options: dict[str, Any], table: tuple[Field, ...] = TRAINING_FIELDS) -> dict[str, Any]:
    """A click command's parsed options under the fields' names (`model_name` -> `model`); a
    command's own options are left out."""
    refuse_empty(options)
    keys = {f.key: f.name for f in table}
    return {keys[k]: v for k, v in options.items() if k in keys}


def refuse_empty(options: dict[str, Any]) -> None:
    """A flag given an empty value on the command line (`--dp ''`) is refused in one line: in a CSV
    cell or a control an empty value means "not given", but a flag given nothing is a mistake."""
    flags = {f.key: f.option for f in (*TRAINING_FIELDS, *EXPERIMENT_FIELDS)}
    for key, value in options.items():
        if isinstance(value, str) and not value.strip():
            flag = flags.get(key, "--" + key.replace("_", "-"))
            raise SpecError(f"{flag}: {value!r} is not allowed; give a value, or leave {flag} out for its default")


def default(name: str, table: tuple[Field, ...] = TRAINING_FIELDS) -> Any:
    """The one default of a field (the command line's flags show and use it)."""
    return (BY_NAME[name] if table is TRAINING_FIELDS else {f.name: f for f in table}[name]).default


def parse_value(field: Field, value: Any, where: str = "") -> Any:
    """A field's value from a string (a CSV cell, a flag's argument, a control) or from a value of
    its own type; an empty string is "not given" (the default). One clear line when not allowed:
    `where` is the flag (`--tp`, named alone) or the place (a CSV line, named before the field)."""
    alone = where in (field.option, field.name)  # the field's own name or flag: said once
    at = f"{where}: " if where and not alone else ""
    name = where if where and alone else field.name
    if field.kind == "list":
        if value is None or (isinstance(value, str) and not value.strip()):
            return field.default
        if isinstance(value, str):  # a CSV cell: values split by ';'
            return tuple(v.strip() for v in value.split(";") if v.strip())
        try:
            return tuple(str(v) for v in value)  # given one by one: as given (an empty one is refused later)
        except TypeError:
            raise SpecError(f"{at}{name}: {value!r} is not allowed; give a list of values") from None
    if value is None or (isinstance(value, str) and not value.strip()):
        return field.default
    text = value.strip() if isinstance(value, str) else value
    if field.kind == "bool":
        if isinstance(text, bool):
            return text
        if str(text).lower() in TRUE_WORDS:
            return True
        if str(text).lower() in FALSE_WORDS:
            return False
        raise SpecError(f"{at}{name}: {value!r} is not allowed; use yes or no")
    if field.kind == "onoff":
        word = {True: "on", False: "off"}.get(text, str(text).lower()) if isinstance(text, bool) else str(text).lower()
        word = "on" if word in TRUE_WORDS else "off" if word in FALSE_WORDS else word
        if word not in field.choices:
            raise SpecError(f"{at}{name}: {value!r} is not allowed; use on or off")
        return word
    if field.kind == "int":
        try:
            if isinstance(text, bool):
                raise ValueError
            if isinstance(text, int):
                out = text
            elif isinstance(text, str) and text.lstrip("+-").isdigit():
                out = int(text)  # exactly, however long (a float would round it)
            else:
                number = float(text)
                if number != int(number):
                    raise ValueError
                out = int(number)
        except (TypeError, ValueError, OverflowError):
            raise SpecError(f"{at}{name}: {value!r} is not allowed; give a whole number") from None
        if field.choices and str(out) not in field.choices:
            raise SpecError(f"{at}{name}: {value!r} is not allowed; use one of {', '.join(field.choices)}")
        return out
    if field.kind == "float":
        try:
            return float(text)  # nan and inf: refused by each field's range (`field_ranges`)
        except (TypeError, ValueError, OverflowError):
            raise SpecError(f"{at}{name}: {value!r} is not allowed; give a number") from None
    text = str(text)
    if field.choices:
        lowered = text.lower()
        if lowered not in field.choices:
            raise SpecError(f"{at}{name}: {value!r} is not allowed; use one of {', '.join(field.choices)}")
        return lowered
    return text


def normalize(request: Any, table: tuple[Field, ...], where: bool = False) -> None:
    """Parse a frozen request's fields in place, one validation for every way in: strings become
    their kind, values are checked (`where`: name the flag in the error)."""
    for f in table:
        value = getattr(request, f.name)
        parsed = parse_value(f, value, f.option if where else "")
        if parsed is not value:
            object.__setattr__(request, f.name, parsed)


def unknown_field(name: str, where: str = "", table: tuple[Field, ...] = TRAINING_FIELDS) -> SpecError:
    """The error for a field no request has, with the closest name."""
    import difflib

    at = f"{where}: " if where else ""
    close = difflib.get_close_matches(name.replace("-", "_"), [f.name for f in table], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see `shardwise predict --help` for the fields"
    return SpecError(f"{at}unknown field {name!r}{hint}")


def argv_of(values: dict[str, Any], table: tuple[Field, ...] = TRAINING_FIELDS) -> list[str]:
    """Command-line arguments for the fields in `values` (by name) that differ from the defaults."""
    out: list[str] = []
    for f in table:
        value = values.get(f.name, f.default)
        if value == f.default and type(value) is type(f.default):
            continue
        if f.kind == "list":
            for item in value:
                out += [f.option, str(item)]
        elif f.kind == "bool":
            out.append(f.option if value else "--no-" + f.option[2:])
        elif value is not None:
            out += [f.option, _text(value)]
    return out


def _text(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if value != int(value) else str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)


def split_argv(argv: Any) -> list[str]:
    """Command-line arguments from one string (split as a shell does) or a list; an unbalanced quote
    or anything else is one `SpecError` line (shlex's ValueError was a traceback, review 37)."""
    import shlex

    if isinstance(argv, str):
        try:
            return shlex.split(argv)
        except ValueError as exc:
            raise SpecError(f"command line {argv!r}: {str(exc).lower()}; close the quote or escape it") from None
    if isinstance(argv, (list, tuple)) and all(isinstance(a, str) for a in argv):
        return list(argv)
    raise SpecError(f"command line: {argv!r} is not allowed; give a string or a list of strings")


def parse_argv(
    argv: list[str] | tuple[str, ...], extra: dict[str, Field] | None = None, table: tuple[Field, ...] = TRAINING_FIELDS
) -> dict[str, Any]:
    """Field values (by name) from command-line arguments as `argv_of` writes them (and as a user
    types them: `--tp 8`, `--tp=8`, `--sequence-parallel`, `--no-sequence-parallel`); `extra` adds
    a command's own flags (by flag). A list field collects every value it is given."""
    flags = {f.option: f for f in table} | (extra or {})
    out: dict[str, Any] = {}
    rest = list(argv)
    while rest:
        token = rest.pop(0)
        flag, eq, attached = token.partition("=")
        negated = flag.startswith("--no-") and ("--" + flag[5:]) in flags
        f = flags.get("--" + flag[5:] if negated else flag)
        if f is None:
            raise SpecError(f"{flag}: not an option of this request")
        if f.kind == "bool":
            if eq:
                raise SpecError(f"{flag}: a switch takes no value (use {f.option} or --no-{f.option[2:]})")
            out[f.name] = not negated
            continue
        if negated:
            raise SpecError(f"{flag}: not an option of this request")
        if not eq:
            if not rest:
                raise SpecError(f"{flag}: needs a value")
            attached = rest.pop(0)
        if f.kind == "list":
            out[f.name] = (*out.get(f.name, ()), attached)
        else:
            out[f.name] = parse_value(f, attached, flag)
    return out
