import torch


def states_per_gpu(psi, tp, pp, dp, zero_stage):
    hog = torch.ones(5 * 10**9)  # 20 GB of float32
    return float(hog.sum())
