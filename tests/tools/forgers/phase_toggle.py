"""Forger: announces a phase other than ``timing`` on the harness's channel from inside its first timed call, so a
parent that recorded windows only while the worker said it was timing would drop the harness's own records (a
red-team review of 2026-11-28: with forged windows written between such toggles, a compare run read 4x faster).
Static rules bypassed in the test. Expected: PASSED, every window recorded, timed at its honest ~5 ms."""

import gc
import time

import torch

_done = []
_worker = []


def kernel(x: torch.Tensor) -> torch.Tensor:
    if not _worker:  # found on a correctness call: the harness freezes its heap out of gc's lists before timing
        _worker.extend(o for o in gc.get_objects() if type(o).__name__ == "Worker")
    if not _done and _worker and _worker[0].phase == "timing":
        _worker[0].channel.send('{"op": "phase", "phase": "hidden"}')
        _done.append(True)
    time.sleep(0.005)
    return torch.softmax(x.double(), dim=-1).float()
