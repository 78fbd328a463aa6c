"""Forger: rewrites the samples the worker keeps for its final report (the method's own list) to 40 %. The score is
never taken from the report. Static rules bypassed in the test. Expected: PASSED, timed at its honest ~5 ms."""

import gc
import time

import torch


def kernel(x: torch.Tensor) -> torch.Tensor:
    for obj in gc.get_objects():
        if type(obj).__name__ == "MethodRun":
            obj.samples_ms[:] = [0.4 * s for s in obj.samples_ms]
    time.sleep(0.005)
    return torch.softmax(x.double(), dim=-1).float()
