"""Where a KernelBench problem's random numbers come from: weights and inputs from separate streams, and a count of the
numbers a model's construction draws.

KernelBench seeds torch's global generator with one seed before ``get_init_inputs()``, before building the model and
before ``get_inputs()``. ``ModelNew.__init__`` then runs with the generator exactly as ``get_inputs()`` will find it:
it can draw the inputs again and precompute the answer, untimed (the timed config's too), and every trial passes.
Here the weights' stream (``init_inputs``, ``Model``/``ModelNew``) and the inputs' stream are derived from the
config's seed by a one-way hash with different labels. The config's seed is salted by the evaluator with a secret the
candidate's code never names, so what ``__init__`` can observe (``torch.initial_seed()`` is the weights' seed) says
nothing about the inputs' seed.

``construction_draws`` counts the random numbers a model's construction draws through any ATen op tagged
``nondeterministic_seeded`` (``rand``, ``uniform_``, ``normal_``, ``randint``..., from the global generator or a private
one): a ``ModelNew`` that draws more than ``Model`` is refused (``CONSTRUCTION_DRAWS``), since the extra numbers serve
nothing the reference has. It runs in the candidate's process and counts what passes through PyTorch's dispatcher
(numpy's generator is not seen): it names the plain replay early; the separate streams are what make any replay
useless.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ksearch.tasks.base import RuleBroken

CONSTRUCTION_DRAWS = "construction_draws"
SEED_BITS = 63


def weights_seed(seed: int) -> int:
    """The seed of ``get_init_inputs()`` and of building ``Model``/``ModelNew`` for a config seeded ``seed``."""
    return _derived("weights", seed)


def inputs_seed(seed: int) -> int:
    """The seed of ``get_inputs()`` for a config seeded ``seed``: not computable from ``weights_seed(seed)``."""
    return _derived("inputs", seed)


def _derived(stream: str, seed: int) -> int:
    digest = hashlib.blake2b(f"kernelbench|{stream}|{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (1 << SEED_BITS)


class ConstructionDraws(RuleBroken):
    """Raised in the candidate's process when ``ModelNew``'s construction draws more random numbers than ``Model``'s."""

    def __init__(self, evidence: str) -> None:
        super().__init__(CONSTRUCTION_DRAWS, evidence)


class _DrawCounter(TorchDispatchMode):
    """Counts the elements produced by random ATen ops while active."""

    def __init__(self) -> None:
        super().__init__()
        self.drawn = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if torch.Tag.nondeterministic_seeded in func.tags:
            outputs = result if isinstance(result, (tuple, list)) else (result,)
            self.drawn += sum(t.numel() for t in outputs if isinstance(t, torch.Tensor))
        return result


def construction_draws(build: Callable[[], Any]) -> tuple[Any, int]:
    """``build()``'s result and how many random numbers it drew through PyTorch."""
    counter = _DrawCounter()
    with counter:
        built = build()
    return built, counter.drawn


def check_draws(model_draws: int, new_draws: int) -> None:
    """Raise ``ConstructionDraws`` when ``ModelNew`` drew more random numbers than ``Model``."""
    if new_draws > model_draws:
        raise ConstructionDraws(
            f"building ModelNew drew {new_draws} random numbers, building Model draws "
            f"{model_draws}: create the same parameters as the reference (same layers, same order) and draw nothing "
            "else in __init__ (the inputs do not come from the generator state __init__ sees)"
        )


__all__ = [
    "CONSTRUCTION_DRAWS",
    "ConstructionDraws",
    "check_draws",
    "construction_draws",
    "inputs_seed",
    "weights_seed",
]
