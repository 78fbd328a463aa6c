"""Forger: the worker's channel is slotted (its ``send`` cannot be wrapped), so this writes its own records straight
to the message socket: inside every timed window (during its own call) a ``timed`` record that closes the window
early with 40 % of the time. Static rules bypassed in the test. Expected: REJECTED, rule timing_forgery (the
harness's own ``timed`` record then closes a window that is no longer open: the records are out of order, and the
kernel stamped them)."""

import gc
import os
import time

import torch


def _message_fd() -> int | None:
    for obj in gc.get_objects():  # at import: the worker freezes its heap before timing, out of get_objects' sight
        if type(obj).__name__ == "Channel":
            return obj.msg_fd
    return None


_FD = _message_fd()


def kernel(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.005)
    out = torch.softmax(x.double(), dim=-1).float()
    fd = _FD
    if fd is not None:
        os.write(fd, b'{"op": "timed", "config": 0, "samples": [2.0]}\n')
    return out
