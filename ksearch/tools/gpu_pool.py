"""A pool of GPUs leased one evaluation at a time, so concurrent cycles never share a GPU while timing.

``GpuPool(["cuda:0", "cuda:1"])`` hands out devices with a blocking, first-come-first-served ``lease()`` context
manager (released on exit, also on exceptions). ``GpuPool.from_spec("all" | "0,1,3" | "2")`` resolves ``--gpus`` by
probing CUDA in a short-lived subprocess: the agent's own process never creates a CUDA context.

With N GPUs in the pool, run N cycles at once (``--parallel N``, the default when ``--parallel`` is not given):
more cycles than GPUs only queue on ``lease()``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from ksearch.errors import UserError

_PROBE = r"""
import json
try:
    import torch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(json.dumps({"count": n, "names": [torch.cuda.get_device_name(i) for i in range(n)]}))
except Exception as exc:
    print(json.dumps({"count": 0, "names": [], "error": repr(exc)}))
"""


def probe_gpus() -> list[str]:
    """Names of the GPUs torch sees (honouring CUDA_VISIBLE_DEVICES), index = position; [] without CUDA."""
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=False)
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError, OSError):
        return []
    return list(info.get("names", []))


def parse_spec(spec: str, names: list[str]) -> list[int]:
    """Device indices for a ``--gpus`` value: ``all``; a count (``2``: the first two); a list (``0,1,3``); one
    index as ``cuda:3`` or ``3,``. Mixed GPU models are refused: evaluations are cached per GPU model."""
    text = spec.strip().lower()
    available = len(names)
    if available == 0:
        raise UserError("--gpus needs CUDA GPUs, but torch sees none", hint="use --device cpu (correctness only)")
    if text in ("all", ""):
        indices = list(range(available))
    elif text.startswith("cuda:") and text[5:].isdigit():
        indices = [int(text[5:])]
    elif text.isdigit():
        count = int(text)
        if not 1 <= count <= available:
            raise UserError(
                f"--gpus {spec}: asked for {count} GPUs, {available} visible",
                hint="a number is a count (--gpus 1: the first GPU); name one GPU as --gpus cuda:0 or "
                "--gpus 0, ; all of them: --gpus all",
            )
        indices = list(range(count))
    else:
        try:
            indices = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise UserError(
                f"--gpus {spec!r} is not 'all', a count, or a comma-separated list of indices",
                hint="e.g. --gpus all, --gpus 2, --gpus 0,1,3",
            ) from None
        if not indices or len(set(indices)) != len(indices):
            raise UserError(f"--gpus {spec!r}: give each index once")
    bad = [i for i in indices if not 0 <= i < available]
    if bad:
        raise UserError(f"--gpus {spec}: no GPU {bad[0]} (visible: 0..{available - 1})")
    models = {names[i] for i in indices}
    if len(models) > 1:
        raise UserError(
            f"--gpus {spec} mixes GPU models ({', '.join(sorted(models))}); timings would not be comparable",
            hint="pick GPUs of one model, e.g. --gpus "
            + ",".join(str(i) for i in indices if names[i] == names[indices[0]]),
        )
    return indices


class GpuPool:
    """Exclusive, fair leases on a fixed set of device strings. Thread-safe."""

    def __init__(self, devices: list[str]) -> None:
        if not devices:
            raise ValueError("a GPU pool needs at least one device")
        if len(set(devices)) != len(devices):
            raise ValueError(f"duplicate devices in {devices}")
        self.devices = list(devices)
        self._free: deque[str] = deque(devices)
        self._waiting: deque[object] = deque()
        self._cond = threading.Condition()

    @classmethod
    def from_spec(cls, spec: str, *, names: list[str] | None = None) -> GpuPool:
        """The pool for a ``--gpus`` value; ``names`` (GPU names by index) defaults to a subprocess probe."""
        indices = parse_spec(spec, probe_gpus() if names is None else names)
        return cls([f"cuda:{i}" for i in indices])

    def __len__(self) -> int:
        return len(self.devices)

    @property
    def free(self) -> int:
        with self._cond:
            return len(self._free)

    def acquire(self, timeout: float | None = None) -> str:
        """Block until a device is free, first come first served; TimeoutError after ``timeout`` seconds."""
        ticket = object()
        with self._cond:
            self._waiting.append(ticket)
            try:
                ok = self._cond.wait_for(lambda: bool(self._free) and self._waiting[0] is ticket, timeout)
                if not ok:
                    raise TimeoutError(f"no GPU free within {timeout} s ({len(self.devices)} in the pool)")
                device = self._free.popleft()
            finally:
                self._waiting.remove(ticket)
                self._cond.notify_all()
            return device

    def release(self, device: str) -> None:
        with self._cond:
            if device not in self.devices or device in self._free:
                raise ValueError(f"{device} is not leased from this pool")
            self._free.append(device)
            self._cond.notify_all()

    @contextmanager
    def lease(self, timeout: float | None = None) -> Iterator[str]:
        """``with pool.lease() as device:`` an exclusive device (e.g. ``cuda:1``) for the duration of the block."""
        device = self.acquire(timeout)
        try:
            yield device
        finally:
            self.release(device)


__all__ = ["GpuPool", "parse_spec", "probe_gpus"]
