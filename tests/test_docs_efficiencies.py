"""docs/model.md's efficiency paragraph quotes what ships: each fitted GPU's sustained scale
(`analyses.loso.SHIPPED_SCALES`) and its preset's GEMM efficiencies (`presets/gpus.yaml`)."""

import re
from pathlib import Path

from shardwise import presets
from shardwise.analyses.loso import SHIPPED_SCALES

DOC = Path(__file__).resolve().parents[1] / "docs" / "model.md"
NAMES = {"A100": "a100-sxm4-80gb", "H100": "h100-sxm5-80gb", "GB200": "gb200", "GB300": "gb300"}
ENTRY = re.compile(r"(\w+) ×(\d\.\d+) \(η_mm (\d\.\d+)(?:, FP8 (\d\.\d+))?\)")


def test_the_shipped_scales_paragraph_matches_the_code():
    text = DOC.read_text()
    block = text.split("<!-- shipped scales -->")[1].split("<!-- end shipped scales -->")[0]
    entries = ENTRY.findall(block)
    assert {NAMES[name] for name, *_ in entries} == set(SHIPPED_SCALES)  # every fitted GPU, no other
    for name, scale, eta, eta_fp8 in entries:
        gpu = presets.gpu(NAMES[name])
        assert float(scale) == SHIPPED_SCALES[NAMES[name]], name
        assert float(eta) == round(float(gpu.matmul_efficiency), 3), name
        assert (float(eta_fp8) if eta_fp8 else 0.0) == round(float(gpu.matmul_efficiency_fp8), 3), name
