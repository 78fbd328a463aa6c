"""Forger: wraps the worker's message channel (an instance attribute) and rewrites every ``timed`` message to 40 % of
its samples before it leaves the process. Static rules bypassed in the test. Expected: REJECTED, rule timing_forgery
(the kernel stamped when each window's messages were sent)."""

import gc
import json
import time

import torch


def _forge() -> None:
    for obj in gc.get_objects():
        if type(obj).__name__ == "Channel" and not getattr(obj, "_forged", False):
            real = obj.send

            def send(payload: str, real=real) -> None:
                if '"timed"' in payload:
                    message = json.loads(payload)
                    message["samples"] = [0.4 * x for x in message["samples"]]
                    payload = json.dumps(message)
                real(payload)

            obj.send = send
            obj._forged = True


def kernel(x: torch.Tensor) -> torch.Tensor:
    _forge()
    time.sleep(0.005)
    return torch.softmax(x.double(), dim=-1).float()
