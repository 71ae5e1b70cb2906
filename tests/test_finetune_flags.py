"""Fine-tuning flags that cannot apply are refused with the flag they need, never silently ignored (issue 37).

Before: ``--lora-targets zz`` (any fine-tuning flag) without ``--finetune`` was ignored, ``--double-quant`` was
accepted for LoRA and ``--lora-alpha inf`` everywhere. Cost: well under a second (parsing only; each refusal comes
before any estimate is computed).
"""

from __future__ import annotations

import pytest

from labkit.cli import main

ANY = "--finetune lora or --finetune qlora"


@pytest.mark.parametrize("argv, message", [
    (["estimate", "--model", "gpt3-175b", "--lora-targets", "zz"], f"--lora-targets needs {ANY}"),
    (["estimate", "--model", "gpt3-175b", "--lora-rank", "4"], f"--lora-rank needs {ANY}"),
    (["estimate", "--model", "gpt3-175b", "--lora-alpha", "16"], f"--lora-alpha needs {ANY}"),
    (["estimate", "--model", "gpt3-175b", "--paged"], f"--paged needs {ANY}"),
    (["advise", "--model", "gpt3-175b", "--gradient-checkpointing"], f"--gradient-checkpointing needs {ANY}"),
    (["advise", "--model", "gpt3-175b", "--double-quant"], "--double-quant needs --finetune qlora"),
    (["measure", "--lora-targets", "zz"], f"--lora-targets needs {ANY}"),
    (["estimate", "--hf-config", "llama-2-7b", "--finetune", "lora", "--double-quant"],
     "--double-quant needs --finetune qlora (got --finetune lora)"),
    (["advise", "--hf-config", "llama-2-7b", "--finetune", "lora", "--double-quant"],
     "--double-quant needs --finetune qlora (got --finetune lora)"),
    (["estimate", "--hf-config", "llama-2-7b", "--finetune", "lora", "--lora-alpha", "inf"],
     "lora_alpha must be a positive finite number (got 'inf')"),
    (["advise", "--hf-config", "llama-2-7b", "--finetune", "qlora", "--lora-alpha", "nan"],
     "lora_alpha must be a positive finite number (got 'nan')"),
    (["estimate", "--hf-config", "llama-2-7b", "--finetune", "qlora", "--lora-alpha", "1e999"],
     "lora_alpha must be a positive finite number (got '1e999')"),
])
def test_a_flag_that_cannot_apply_is_one_line_naming_what_it_needs(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"labkit: error: {message}" + err.split(message, 1)[1] and err.count("\n") == 1, err


def test_the_same_flags_with_what_they_need_still_work(capsys):
    assert main(["estimate", "--hf-config", "llama-2-7b", "--finetune", "qlora", "--double-quant",
                 "--lora-alpha", "32", "--lora-targets", "q,v"]) == 0
    assert "double quantization" in capsys.readouterr().out
