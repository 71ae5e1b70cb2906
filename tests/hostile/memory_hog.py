import os
import time


def states_per_gpu(psi, tp, pp, dp, zero_stage):
    for _ in range(3):  # three processes of 600 MB each: every one is under its own limit, not the sum
        if os.fork() == 0:
            hog = b"x" * (600 * 2**20)
            time.sleep(60 + len(hog) * 0)
            os._exit(0)
    hog = b"x" * (600 * 2**20)
    time.sleep(60 + len(hog) * 0)
