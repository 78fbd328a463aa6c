"""What machine and software an evaluation ran with: part of the evaluation cache key and of the prompts.

GPU properties are read in a short-lived subprocess so the agent's own process never creates a CUDA context.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from functools import cache
from typing import NamedTuple

from pydantic import BaseModel

from ksearch.tools.evaluator import HARNESS_VERSION  # bumped when the evaluator's semantics change

_PROBE = r"""
import json, platform, sys
info = {"python": platform.python_version()}
try:
    import torch
    info["torch"] = torch.__version__
    if sys.argv[1] != "cpu" and torch.cuda.is_available():
        idx = int(sys.argv[1].split(":")[1]) if ":" in sys.argv[1] else 0
        p = torch.cuda.get_device_properties(idx)
        info.update(gpu=p.name, sms=str(p.multi_processor_count), memory_gb=f"{p.total_memory / 2**30:.0f}",
                    capability=f"{p.major}.{p.minor}", cuda=str(torch.version.cuda),
                    l2_mb=f"{getattr(p, 'L2_cache_size', 0) / 2**20:.0f}",
                    shared_per_block_optin=str(getattr(p, "shared_memory_per_block_optin", 0)),
                    shared_per_sm=str(getattr(p, "shared_memory_per_multiprocessor", 0)),
                    registers_per_sm=str(getattr(p, "regs_per_multiprocessor", 0)),
                    max_threads_per_sm=str(getattr(p, "max_threads_per_multi_processor", 0)))
except Exception as exc:
    info["torch_error"] = repr(exc)
try:
    import triton
    info["triton"] = triton.__version__
except Exception as exc:
    info["triton_error"] = repr(exc)
print(json.dumps(info))
"""


class DeviceInfo(BaseModel):
    device: str
    python: str = ""
    torch: str = ""
    triton: str = ""
    gpu: str | None = None
    sms: str | None = None
    memory_gb: str | None = None
    capability: str | None = None
    cuda: str | None = None
    l2_mb: str | None = None
    shared_per_block_optin: str | None = None
    shared_per_sm: str | None = None
    registers_per_sm: str | None = None
    max_threads_per_sm: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None

    def describe(self, target_gpu: str | None = None) -> str:
        """The device for prompts, with the limits a kernel must fit and the peaks it is measured against
        (``ksearch.tools.gpu_specs``); on the CPU, the target GPU's (``target_gpu``) or plainly none."""
        from ksearch.tools.gpu_specs import LIMITS_PREFIX, describe_cpu, describe_gpu

        if not self.is_gpu:
            return describe_cpu(target_gpu)
        limits = describe_gpu(self.gpu or "", self.model_dump())
        sizes = (
            ""  # the limits line states the SMs, memory and L2, the device's own figures where it reports them
            if limits.startswith(LIMITS_PREFIX)
            else f", {self.sms} SMs, {self.memory_gb} GiB memory, {self.l2_mb} MB L2"
        )
        line = (
            f"{self.gpu} (compute capability {self.capability}{sizes}), CUDA {self.cuda}, torch {self.torch}, "
            f"triton {self.triton}"
        )
        return line + "\n" + limits

    def eval_key(self, task: str, timing_method: str | None = None, target_gpu: str | None = None) -> str:
        """Evaluations are reused only for the same task definition (its file's contents, not just its name), test
        and benchmark configs, timing method, device model (or the GPU a CPU evaluation is aimed at), harness and
        software versions (the code's hash is the other half of the key, in the store)."""
        where = self.gpu or "cpu-interpreter"
        signature = task_signature(task, "cuda" if self.is_gpu else "cpu", timing_method)
        target = f"|target={target_gpu}" if target_gpu and not self.is_gpu else ""
        return (
            f"{task}|{where}|harness={HARNESS_VERSION}|torch={self.torch}|triton={self.triton}"
            f"|definition={signature.definition}|configs={signature.configs}|timing={signature.method}{target}"
        )


class TaskSignature(NamedTuple):
    definition: str
    """Hash of the task's definition (``Task.definition_digest``): reference, input generator, tolerances."""
    configs: str
    """Hash of the test and benchmark configs on the device."""
    method: str
    """The timing method, or 'untimed' on the CPU."""


def task_signature(task: str, device: str, timing_method: str | None = None) -> TaskSignature:
    """What of the task decides a verdict on ``device``, as short hashes (see ``TaskSignature``)."""
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.timing import resolve_method

    resolved = resolve_task(task)
    payload = json.dumps(
        {
            "test": [c.model_dump() for c in resolved.test_configs(device)],
            "bench": [c.model_dump() for c in resolved.benchmark_configs(device)],
        },
        sort_keys=True,
    )
    method = resolve_method(resolved, timing_method) if device != "cpu" else "untimed"
    return TaskSignature(
        definition=resolved.definition_digest()[:16],
        configs=hashlib.sha256(payload.encode()).hexdigest()[:16],
        method=method,
    )


_GPU_PROBES_WITHOUT_GPU: list[DeviceInfo] = []
"""GPU probes of this process that found no GPU: each read everything the CPU's probe reads."""


@cache
def probe_device(device: str) -> DeviceInfo:
    """``device``'s properties and the software versions, read once per process and device. A GPU is read in a probe
    process (the agent's own process never creates a CUDA context). The CPU's answer (python, torch and triton
    versions) is read without one where it can be: from a GPU probe that found no GPU (``--device auto`` on a CPU
    machine), or in this process where torch is already imported; a probe process imports torch again (1.5 s)."""
    if device == "cpu":
        if _GPU_PROBES_WITHOUT_GPU:
            return _GPU_PROBES_WITHOUT_GPU[0].model_copy(update={"device": "cpu"})
        if _torch_imported():
            return _probe_cpu_here()
    info = _probe_process(device)
    if device != "cpu" and not info.is_gpu:
        _GPU_PROBES_WITHOUT_GPU.append(info)
    return info


def _torch_imported() -> bool:
    return "torch" in sys.modules


def _probe_cpu_here() -> DeviceInfo:
    """What the probe process reads for the CPU, read in this process (torch is already imported here)."""
    import platform

    import torch

    info = {"python": platform.python_version(), "torch": str(torch.__version__)}
    try:
        import triton

        info["triton"] = str(triton.__version__)
    except Exception:  # as the probe process: a missing or broken triton leaves its version empty
        pass
    return DeviceInfo(device="cpu", **info)


def _probe_process(device: str) -> DeviceInfo:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, device], capture_output=True, text=True, timeout=120, check=False
    )
    try:
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        info = {"torch_error": out.stderr[-500:]}
    return DeviceInfo(device=device, **{k: v for k, v in info.items() if k in DeviceInfo.model_fields})
