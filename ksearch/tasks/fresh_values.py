"""Which inputs may take fresh values in place: checks of a task's declaration, and a probe for tasks whose inputs come
from a user's file (KernelBench problems, operator files), where no role can be declared by hand.

The evaluator re-randomises an input set after a timing loop by copying ``make_inputs`` with a fresh seed into the
positions ``Task.activation_inputs`` returns. That is only sound when each such position holds a tensor whose shape,
dtype and device do not depend on the seed; ``fresh_value_problems`` says where a declaration breaks that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ksearch.tasks.base import Task, TaskConfig

PROBE_SEED_OFFSET = 1_000_003
"""The second seed of a probe: ``config.seed`` plus this (any other seed would do; the evaluator's own are secret)."""


def fresh_value_problems(task: Task, config: TaskConfig, device: str = "cpu") -> list[str]:
    """Why the positions ``task.activation_inputs(config)`` declares cannot take the values of another seed in place
    (inputs from ``config.seed`` and one other seed compared); empty when they can."""
    first = task.make_inputs(config, device)
    second = task.make_inputs(config.model_copy(update={"seed": config.seed + PROBE_SEED_OFFSET}), device)
    declared = task.activation_inputs(config)
    positions = range(len(first)) if declared is None else declared
    problems = []
    if len(first) != len(second):
        problems.append(f"{len(first)} inputs with one seed, {len(second)} with another")
    for position in positions:
        if not 0 <= position < min(len(first), len(second)):
            problems.append(f"position {position} is not an input (there are {len(first)})")
            continue
        reason = _mismatch(first[position], second[position])
        if reason:
            problems.append(f"input {position}: {reason}")
    return [f"{task.name} {config.name}: {p}" for p in problems]


def swappable_positions(first: Sequence[Any], second: Sequence[Any]) -> tuple[int, ...]:
    """The tensor positions of two seeds' inputs that can take the second's values in place: every tensor, when all
    tensors keep their shape and dtype and every other input (a Python number, a list) is equal between the seeds;
    none otherwise, since fresh values beside a stale size or count could be an invalid input set."""
    if len(first) != len(second):
        return ()
    positions = []
    for position, (a, b) in enumerate(zip(first, second, strict=True)):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if _mismatch(a, b):
                return ()
            positions.append(position)
        elif not _plain_equal(a, b):
            return ()
    return tuple(positions)


def probe_activation_inputs(make_inputs: Callable[[TaskConfig, str], list[Any]], config: TaskConfig) -> tuple[int, ...]:
    """``swappable_positions`` of ``make_inputs`` at ``config.seed`` and another seed, made on the meta device when
    the code allows (shapes and dtypes without memory or time: problem inputs can be gigabytes), else on the CPU."""
    other = config.model_copy(update={"seed": config.seed + PROBE_SEED_OFFSET})
    try:
        with torch.device("meta"):
            pair = make_inputs(config, "meta"), make_inputs(other, "meta")
    except Exception:  # noqa: BLE001 - code that cannot run on meta tensors (a generator, .item()) runs on the CPU
        pair = make_inputs(config, "cpu"), make_inputs(other, "cpu")
    return swappable_positions(*pair)


def probed_activation_inputs(task: Task, config: TaskConfig) -> tuple[int, ...]:
    """``probe_activation_inputs`` of ``task.make_inputs``, once per config and task instance (the evaluator asks
    after every timing loop)."""
    cache: dict[str, tuple[int, ...]] = task.__dict__.setdefault("_probed_activation_inputs", {})
    key = config.model_dump_json()
    if key not in cache:
        cache[key] = probe_activation_inputs(task.make_inputs, config)
    return cache[key]


def _mismatch(a: Any, b: Any) -> str:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return f"{type(a).__name__} and {type(b).__name__}, not tensors: cannot be written in place"
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return (
            f"{a.dtype} {tuple(a.shape)} on {a.device} with one seed, {b.dtype} {tuple(b.shape)} on {b.device} with "
            "another"
        )
    return ""


def _plain_equal(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an object without a plain comparison counts as different
        return False


__all__ = ["fresh_value_problems", "probe_activation_inputs", "probed_activation_inputs", "swappable_positions"]
