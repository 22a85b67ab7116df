"""A static batch's prefill as llama.cpp runs it (`engines.serving.estimate_serving`, review 52):
the batch's prompt tokens cut into n_ubatch micro-batches (`EnginePreset.ubatch_tokens`, 512:
llama.cpp common/common.h `n_ubatch = 512`), each priced on its own tokens (MMQ's token tile,
`physics.mmq_ids`) and run one after another through the layer split, as `engines.iteration`
prices every llama.cpp step and `analyses.serving_pcie.pair_chunk` the measured pairs."""

from __future__ import annotations

import numpy as np

from shardwise.engines.iteration import iteration_times
from shardwise.specs import Scenario
from shardwise.specs._checks import Number
from shardwise.specs.serving import ServingWorkload


def ubatch_prefill(scn: Scenario, wl: ServingWorkload, per_replica: Number) -> tuple[Number, dict[str, Number]]:
    """(TTFT, its parts: compute, tp_comm, pp_p2p, pp_wait, pp_bubble) of `per_replica` prompts of
    `wl.input_len` tokens prefilled together in n_ubatch micro-batches (`scn` as
    `engines.serving.serving_scenario` makes it); the bubble is what the round waits beyond them."""
    tokens = np.asarray(per_replica, dtype=float) * wl.input_len
    it = iteration_times(scn, wl, np.zeros_like(tokens), tokens, float(wl.input_len))
    parts = {"compute": it.compute_s, "tp_comm": it.tp_comm_s, "pp_p2p": it.pp_p2p_s, "pp_wait": 0.0}
    return it.total_s, {**parts, "pp_bubble": it.total_s - it.compute_s - it.tp_comm_s - it.pp_p2p_s}
