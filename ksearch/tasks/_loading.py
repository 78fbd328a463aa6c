"""Shared helpers for tasks defined by a user's Python file (KernelBench problems, user operators).

The file is the user's own definition of the problem, but it is code: it is imported only in processes that do not
hold the API key (the evaluator's worker and checker, the loader of ``ksearch.tasks.keyless``); a process that holds
it gets the task's description instead (``ksearch.tasks.described``), and ``import_file`` refuses there. The
candidate is never imported here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from ksearch.errors import UserError
from ksearch.redaction import holds_secret

_CACHE: dict[tuple[str, str], ModuleType] = {}


OPERATOR_PROTOCOL = Path(__file__).resolve().parent / "userop" / "PROTOCOL.md"
"""The operator file format with a worked example, where this ksearch is installed (a wheel has no repository)."""
OPERATOR_FORMAT_HINT = f"see {OPERATOR_PROTOCOL} for the operator file format"


class ProblemFormatError(UserError):
    """A problem or operator file cannot be used: it does not import, or it lacks a required name."""


class KeyHeldError(RuntimeError):
    """A task file was about to be imported into a process that holds an API key (a bug: such a process loads it
    through ``ksearch.tasks.keyless``)."""


def import_file(path: Path, *, prefix: str) -> ModuleType:
    """Import ``path`` as a fresh module (cached while the file's contents are unchanged: by their hash, since an
    edit within one tick of the file system's clock keeps the time stamp); errors name the file. Never in a process
    that holds an API key (``KeyHeldError``)."""
    if holds_secret():
        raise KeyHeldError(f"{path} is a task file: it is not imported into a process that holds an API key")
    path = path.resolve()
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    key = (str(path), hashlib.sha256(content).hexdigest())
    if key in _CACHE:
        return _CACHE[key]
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"{prefix}_{path.stem.replace('-', '_').replace('.', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProblemFormatError(f"{path} is not a Python module (expected a .py file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # the user's file: show them their own error
        sys.modules.pop(name, None)
        detail = "".join(traceback.format_exception_only(exc)).strip()
        raise ProblemFormatError(
            f"importing {path} failed: {detail}", hint="run `python FILE` to see the full error"
        ) from exc
    _CACHE[key] = module
    return module


def to_device(value: Any, device: str) -> Any:
    """Tensors (also inside lists and tuples) moved to ``device``; anything else unchanged."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    return value


def tolerance_for(dtype: Any, fp32: float = 1e-4, half: float = 1e-2) -> float:
    """KernelBench's per-dtype tolerance (atol = rtol): 1e-4 for fp32 (since its late-2025 fix), 1e-2 for fp16/bf16."""
    import torch

    if dtype in (torch.float16, torch.bfloat16):
        return half
    return fp32


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
