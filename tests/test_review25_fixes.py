"""review25's findings on walkthrough8 and mbeffect: each fix with a test that failed before it."""

from __future__ import annotations


def test_public_json_keeps_split_and_marks_the_inspected_holdout_apart():
    """`validate public --json` gave the LoRA holdout's table a third `split` value, 'holdout
    (inspected)'; `split` keeps the values it had and `inspected` / `label` say the rest."""
    from shardwise.cli.validate_public import INSPECTED, SPLITS, _table_json

    lora = _table_json("LoRA fine-tuning (all sources)", INSPECTED, {"rows": 27})
    assert lora["split"] == dict(SPLITS)["holdout"] and lora["inspected"] is True and lora["label"] == INSPECTED
    dense = _table_json("all public sources", dict(SPLITS)["holdout"], {"rows": 1})
    assert dense["split"] == dense["label"] == "holdout (untouched)" and dense["inspected"] is False
    assert _table_json("x", "dev (fitted)", {})["split"] == "dev (fitted)"


def test_a_missing_csv_calibration_is_answered_as_a_missing_file(cli, tmp_path):
    """`--calibration nothere.csv` said 'a CSV of runs, not a calibration' of a file that is not there."""
    missing = tmp_path / "nothere.csv"
    code, out, err = cli(["predict", "--model", "gpt-1.7b", "--system", "dgx-a100", "--calibration", str(missing)])
    assert code == 2 and not out
    assert err.strip() == f"error: {missing}: cannot read (No such file or directory)"


def test_seconds_beside_a_limit_carry_digits_past_a_thousand_seconds():
    """format_seconds_beside(1000.4, 1000) read '1,000 s': the digits were ignored at >= 1000 s."""
    from shardwise.units import format_seconds, format_seconds_beside

    assert format_seconds_beside(1000.4, 1000.0) == "1,000.4 s"
    assert format_seconds(1234.5) == "1,234 s" and format_seconds(20400.0) == "20,400 s"  # unchanged at 3 digits
    assert format_seconds_beside(1500.0, 1000.0) == "1,500 s"


def test_rows_refused_without_named_tables_says_what_was_asked(cli):
    """`validate --calibrated --rows all` said 'the tables asked for have no such list' with none named."""
    code, _, err = cli(["validate", "--calibrated", "--rows", "all"])
    assert code == 2 and "--calibrated's learning curves have no such list" in err
    code, _, err = cli(["validate", "--rows", "all"])
    assert code == 2 and "the default tables (no table named) have no such list" in err
    code, _, err = cli(["validate", "planner", "--rows", "all"])
    assert code == 2 and "the tables asked for (planner) have no such list" in err
