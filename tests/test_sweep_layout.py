"""sweep prices a training plan as written (ZeRO-0, sequence parallelism off unless its `zero=` and
`sp=` keys say), as crossover does; its text says so and names the stack's own layout defaults that
predict takes, and its JSON and CSV carry each plan's ZeRO stage and sequence parallelism beside
`recompute[PLAN]` (review 45 #2)."""

from __future__ import annotations

import csv
import io
import json

from click.testing import CliRunner

from shardwise.cli import cli as main

ARGS = ["--model", "llama3-8b", "--system", "dgx-h100", "--framework", "torchtitan"]
PLANS = ["--plan", "tp=8", "--plan", "tp=8,zero=3,sp=on", "--vary", "batch=8"]


def test_sweep_text_says_plans_are_taken_as_written_and_names_the_stacks_defaults():
    out = CliRunner().invoke(main, ["sweep", *ARGS, *PLANS])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "plans as written: sequence parallelism off, ZeRO-0 unless a plan says sp=on or zero=N" in text
    assert "torchtitan's sp=on where tp > 1 and zero=3" in text


def test_sweep_json_and_csv_carry_each_plans_zero_stage_and_sequence_parallelism():
    data = json.loads(CliRunner().invoke(main, ["sweep", *ARGS, *PLANS, "--json"]).stdout)
    assert data["layout_by_plan"] == {
        "tp=8": {"zero_stage": 0, "sequence_parallel": False},
        "tp=8,zero=3,sp=on": {"zero_stage": 3, "sequence_parallel": True},
    }
    assert data["stack_layout"] == {"sequence_parallel": True, "zero_stage": 3}  # what predict would take
    rows = list(csv.DictReader(io.StringIO(CliRunner().invoke(main, ["sweep", *ARGS, *PLANS, "-o", "-"]).stdout)))
    row = rows[0]
    assert (row["zero_stage[tp=8]"], row["sequence_parallel[tp=8]"]) == ("0", "false")
    assert (row["zero_stage[tp=8,zero=3,sp=on]"], row["sequence_parallel[tp=8,zero=3,sp=on]"]) == ("3", "true")


def test_serving_sweeps_carry_no_training_layout():
    args = ["sweep", "--model", "llama3-8b", "--system", "dgx-h100", "--workload", "decode", *PLANS, "--json"]
    data = json.loads(CliRunner().invoke(main, args).stdout)
    assert data["layout_by_plan"] == {"tp=8": {}, "tp=8,zero=3,sp=on": {}} and "stack_layout" not in data
    assert "plans as written" not in " ".join(CliRunner().invoke(main, args[:-1]).output.split())
