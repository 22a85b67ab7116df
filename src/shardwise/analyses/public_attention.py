"""Which attention kernel a published run's recipe ran where it is not its stack preset's, each
read in the launch configuration that produced the rows, at the rows' versions. Nothing here is
fitted.

Transformer Engine picks its attention backend per call; on Hopper it prefers cuDNN's fused
attention (FusedAttention, "F16_arbitrary_seqlen") over the flash-attn package whenever both can
run the shape, context parallelism included, from TE 1.3 on (transformer_engine/pytorch/attention.py
at v1.3 and v1.4, "Select FusedAttention on sm90 and FlashAttention on others for performance";
TE 1.2 ran context parallelism on flash-attn alone). NVTE_FUSED_ATTN=0 turns cuDNN off: TE then
calls flash-attn's FlashAttention-2 kernels (`attention_kernel` "te-flash2", priced at the GPU's
`flash2_efficiency` with TE's own context-parallel ring, `physics.attention_kernels`), 0.47 of the
GEMMs' efficiency on an H100 against cuDNN's 0.75 (FlashAttention-3 paper, Fig. 4-5). Where a
container shipped FlashAttention-3 as well, TE from 1.9 would call it instead (near cuDNN's speed):
whether the containers below did is not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NEMO_DOCS = "GitHub NVIDIA/NeMo docs/source/performance/"
DGXC = "GitHub NVIDIA/dgxc-benchmarking "


@dataclass(frozen=True)
class KernelFact:
    """The rows a launch configuration covers: the source starts with `source` and, where `version`
    is given, the row's `framework_version` is it or the row was first seen at that commit; a row of
    model `skip_model` is not covered."""

    source: str
    version: str = ""
    skip_model: str = ""

    def covers(self, row: dict[str, str]) -> bool:
        if not row["source"].startswith(self.source) or (self.skip_model and row.get("model") == self.skip_model):
            return False
        seen = row.get("commit_or_version", "")
        return (
            not self.version
            or row.get("framework_version") == self.version
            or seen.startswith(f"first seen {self.version}")
        )


# Runs whose launch configuration set NVTE_FUSED_ATTN=0 (Transformer Engine's FlashAttention-2 backend):
TE_FLASH2_FACTS = (
    # NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/config.yaml, env_vars: "NVTE_FUSED_ATTN: 0
    # # Disable cudnn FA until we've tested it more", on its main branch from 562dcb45 (2024-02-13) to
    # a6490ffe (2024-07-15, "Enable cuDNN FA"), in the tags 24.03, 24.03.01 and 24.05. The launcher is
    # how NeMo's performance tables of the time were run (its examples/README.md holds the same
    # benchmark tables). NeMo 24.03.01's long-sequence table (Llama 2 7B on H100, 4K-1M tokens; the
    # 24.03 container's TE 1.3, Megatron-Core 0.5.0, PyTorch 2.2.0 by NVIDIA's software component
    # table) was run in that window whichever launcher commit ran it.
    *(KernelFact(NEMO_DOCS, version) for version in ("24.03", "24.03.01", "24.05")),
    # NeMo's 24.07 summary, run by the launcher's example scripts (`public_nemo1_launcher`): the tag
    # 24.07 (8325688d, 2024-08-01, not descended from a6490ffe) sets 0 in config.yaml; main set 0
    # again from 95c77b59 (2024-07-17) until 04b8d098 (2024-08-29, "enable fused attention"), with
    # `+env_vars.NVTE_FUSED_ATTN=1` in examples/training/gpt/h100/175b_fp8_16node.sh alone. Which
    # launcher ran the summary is not settled: its Llama 2 70B pre-training VP 20 is the tag's (main's
    # fee1762f, 2024-08-02, made it 5), its Llama 3 70B VP 5 and GPT-3 175B VP 6 main's; its final
    # numbers came with PR #10253 (2024-09-09), after main's 04b8d098 removed the 0, and its first 24.07
    # version (4c73f77670, 2024-08-14) is within 4.5% of them with no attention-heavy pattern: both ran
    # flash-attn, or the flash-attn/cuDNN gap is smaller than priced; that check cannot tell. Priced: 0
    # (flash-attn) for every row but GPT-3 175B's, which keeps the preset's cuDNN on the script's
    # +env_vars alone (uncertain: 175b_mlperf.yaml's NVTE_FUSED_ATTN: 1,
    # `public_nemo1_launcher.MATCHED`, sits in the training group, which the launcher's stages.py
    # get_env_vars does not export).
    # The 24.07 container's TE is 1.8.0.dev0 (docs.nvidia.com/nemo-framework/user-guide/24.09/
    # softwarecomponentversions.html): FlashAttention-2, no FlashAttention-3 path.
    KernelFact(NEMO_DOCS + "performance_summary.md", "24.07", skip_model="gpt3-175b"),
    # dgxc-benchmarking's NeMo 1 launches (nemo:24.09, TE 1.10): nemotron/configure.sh exports
    # NVTE_FUSED_ATTN=0 for the 340B (and 1 for the 15B) at 35a9aecc8d - 1b9bb6b3cf; grok1/configure.sh
    # 0 at every commit; nemo_megatron/launch.sh (35a9aecc8d) and configure.sh (143b90dd91, e6afea3aea)
    # 0 for GPT-3 175B, 1 from 8f5cbb3799 on.
    KernelFact(DGXC + "nemotron/README_340b.md"),
    KernelFact(DGXC + "grok1/README_314b.md"),
    KernelFact(DGXC + "nemo_megatron/README_175b.md", "35a9aecc8d"),
    KernelFact(DGXC + "nemo_megatron/README_175b.md", "e6afea3aea"),
)
# JAX-Toolbox's Paxml 23.10 release: no flash attention. Transformer Engine's fused attention is
# off unless NVTE_FUSED_ATTN=1 (praxis te_helper: os.getenv("NVTE_FUSED_ATTN", "0")), which the
# 23.10 rosetta/Dockerfile.pax (db437900) does not set, and XLA's cuDNN attention
# (--xla_gpu_enable_cudnn_fmha) was off by default; the 24.04 README is the first to say "Flash
# attention is enabled by default in the given container" (its Dockerfile sets NVTE_FUSED_ATTN=1).
NO_FLASH_VERSIONS = ("paxml:23.10",)


def attention_settings(row: dict[str, str], preset: str) -> dict[str, Any]:
    """Plan keyword arguments for the attention kernel the row's launch configuration ran (empty:
    its preset's)."""
    if preset == "paxml" and row.get("framework_version") in NO_FLASH_VERSIONS:
        return {"flash_attention": False}
    if preset == "megatron-core" and any(f.covers(row) for f in TE_FLASH2_FACTS):
        return {"attention_kernel": "te-flash2"}
    return {}
