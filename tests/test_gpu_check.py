"""The GPU check: finds this GPU in the catalogue, and without CUDA runs its CPU part and says so."""

import pytest
import torch

from labkit.measure.gpu_check import main
from labkit.measure.step_time import catalogue_gpu


@pytest.mark.parametrize("cuda_name, entry", [
    ("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("Some Other GPU", None),
])
def test_catalogue_entry_from_the_cuda_name(cuda_name, entry):
    found = catalogue_gpu(cuda_name)
    assert (found and found.name) == entry


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs the GPU measurements on a CUDA machine")
def test_without_cuda_it_runs_the_cpu_part_and_says_so(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "no CUDA" in out and "whole-step peak" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs the GPU measurements on a CUDA machine")
def test_the_shell_script_exits_0_saying_no_cuda(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONPATH": str(root), "PYTHON": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(root / "tools" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "no CUDA" in done.stdout and "whole-step peak" in done.stdout
