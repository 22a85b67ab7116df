"""tools/implied_scales.py: each public row's implied efficiency scale (docs/model.md, GB200's fitted scale)."""

from __future__ import annotations

import statistics

import pytest

from script_module import load_script
from shardwise.analyses import loso

pytestmark = pytest.mark.slow  # prices every public row over a grid of efficiencies (~8 s)


def _tool():
    return load_script("tools/implied_scales.py", "shardwise_implied_scales_tool")


tool = _tool()


@pytest.mark.parametrize("gpu", ["gb200", "gb300", "h100-sxm5-80gb"])
def test_the_fitted_scale_is_the_median_of_its_rows_implied_scales(gpu):
    """Each row's error falls as the scale grows, so the median error of the fitting rows is zero at
    the median of their implied scales: the tool reads the same rows and grid as the fit."""
    rows = [p for p in loso.priced_rows() if p.gpu == gpu and p.sets_scale and p.compute_share >= loso.COMPUTE_SHARE]
    implied = sorted(tool.implied_scale(p) for p in rows)
    fitted = loso.fit_scales(list(loso.priced_rows()))[gpu]
    step = float(loso.GRID[1] - loso.GRID[0])
    low, high = statistics.median_low(implied), statistics.median_high(implied)
    assert low - step - 1e-9 <= fitted <= high + step + 1e-9, (gpu, fitted, low, high)


def test_a_row_at_its_implied_scale_is_nearer_its_measurement_than_at_a_neighbouring_scale():
    p = next(p for p in loso.priced_rows() if p.row.run_id == "PUB-0884")
    s = tool.implied_scale(p)
    step = float(loso.GRID[1] - loso.GRID[0])
    error = {x: abs(p.at({p.fitted_gpu: x}) / p.row.measured_step_s - 1.0) for x in (s - step, s, s + step)}
    assert error[s] <= min(error[s - step], error[s + step])
    # the table of docs/model.md: GB200's Llama 3 8B and Llama 3.1 405B groups imply different scales
    by_model = {key[0]: [x for x, _, _ in v] for key, v in tool.groups("gb200", "dev").items()}
    assert max(by_model["llama3-405b"]) < min(by_model["llama3-8b"])


def test_an_unknown_gpu_is_one_line_and_exit_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["no-such-gpu"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-gpu" in err
