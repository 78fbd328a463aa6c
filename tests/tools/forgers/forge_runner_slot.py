"""Forger: reaches the worker's timing runner through the caller's frame and replaces its elapsed-time reference (a
slot of the instance, which the guard's reference table does not cover) by one that reports 40 % of the time.
Static rules bypassed in the test. Expected: REJECTED, rule timing_forgery (the parent's clock saw the real time)."""

import sys
import time

import torch

_DONE = set()


def kernel(x: torch.Tensor) -> torch.Tensor:
    frame = sys._getframe(1)
    while frame is not None:
        runner = frame.f_locals.get("runner") or frame.f_locals.get("self")
        if type(runner).__name__ == "WorkerTimingRunner" and id(runner) not in _DONE:
            real = runner._elapsed
            runner._elapsed = lambda start, end, real=real: 0.4 * real(start, end)
            _DONE.add(id(runner))
            break
        frame = frame.f_back
    time.sleep(0.005)
    return torch.softmax(x.double(), dim=-1).float()
