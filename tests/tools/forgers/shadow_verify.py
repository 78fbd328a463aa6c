"""Guard switch-off: sets a no-op ``verify`` on the worker instance (and on the guard) so the checks after each call
do nothing. Both are slotted: the assignment fails. Static rules bypassed in the test. Expected: not PASSED (the
candidate's own AttributeError)."""

import gc

import torch

for _obj in gc.get_objects():
    if type(_obj).__name__ in ("Worker", "Guard"):
        _obj.verify = lambda *args, **kwargs: None


def kernel(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1).float()
