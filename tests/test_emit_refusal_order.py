"""`--emit TOOL` refuses what the tool cannot run at all before asking for a plan that fits: a model
outside torchtitan's registry was refused only once a memory refusal had been fixed (review 45 #8)."""

from __future__ import annotations

ARGS = ["predict", "--model", "qwen2.5-7b", "--system", "dgx-h100", "--global-batch", "16"]


def test_torchtitan_names_its_registry_before_the_memory_refusal(cli):
    code, _, err = cli([*ARGS, "--emit", "torchtitan"])
    assert code == 2 and "torchtitan builds only its registered models" in err and "GB per GPU" not in err
    # the same plan on a tool that can run the model is still refused for its memory
    code, _, err = cli([*ARGS, "--emit", "megatron"])
    assert code == 2 and "GB per GPU" in err
