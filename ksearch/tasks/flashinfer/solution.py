"""ksearch candidates <-> flashinfer-bench ``Solution`` JSON.

Export (``to_solution_json``): a ksearch candidate is one Python module defining ``run(*inputs)`` that returns the
outputs, so it becomes a Solution with a single source ``main.py``, ``entry_point = "main.py::run"`` and
``destination_passing_style = False``. ``spec.language`` is ``triton`` for Triton candidates and ``python`` for
ksearch "CUDA" candidates: those are Python modules that compile their CUDA with
``torch.utils.cpp_extension.load_inline``, which flashinfer-bench's Python builder imports as is (its ``cuda``
language means raw .cu sources built through TVM-FFI, which these are not).

Import (``candidate_code_from_solution``): a Solution JSON whose sources are a single Python file (language
python or triton; the entry file may have any name) becomes the candidate module; its entry symbol is aliased to
``run``. A destination-passing-style entry point is wrapped: the wrapper allocates the outputs with
``torch.empty`` from the definition's output shapes and dtypes (variable axes bound from the inputs' shapes, as
flashinfer-bench does) and returns them. Not supported (a FlashInferError says so): several source files (relative
imports between them), and cpp/cuda/tilelang sources (TVM-FFI or torch-extension builds of raw C++/CUDA).
"""

from __future__ import annotations

import json
from typing import Any

from ksearch.tasks.flashinfer.definitions import FlashInferError, fib

ENTRY_FILE = "main.py"


def to_solution(
    definition: str,
    code: str,
    language: str,
    *,
    name: str,
    author: str = "ksearch",
    description: str | None = None,
    target_hardware: tuple[str, ...] = ("cuda",),
) -> Any:
    """A ``flashinfer_bench.Solution`` (value-returning, ``main.py::run``) holding the candidate's module."""
    fib_language = {"triton": "triton", "cuda": "python", "python": "python"}.get(str(language))
    if fib_language is None:
        raise FlashInferError(f"cannot export a {language} candidate as a flashinfer-bench Solution")
    module = fib()
    return module.Solution(
        name=name,
        definition=definition,
        author=author,
        description=description,
        spec=module.BuildSpec(
            language=fib_language,
            target_hardware=list(target_hardware),
            entry_point=f"{ENTRY_FILE}::run",
            dependencies=[],
            destination_passing_style=False,
        ),
        sources=[module.SourceFile(path=ENTRY_FILE, content=code)],
    )


def to_solution_json(definition: str, code: str, language: str, *, name: str, **kwargs: Any) -> str:
    """``to_solution`` as JSON text (what a flashinfer-trace ``solutions/`` folder holds)."""
    return to_solution(definition, code, language, name=name, **kwargs).model_dump_json(indent=2)


def solution_from_json(text: str) -> Any:
    return fib().Solution.model_validate_json(text)


def looks_like_solution_json(text: str) -> bool:
    """True for a JSON object with ``sources`` and ``spec`` (so ``ksearch eval`` can accept either kind of file)."""
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and "sources" in data and "spec" in data


def candidate_code_from_solution(text: str, definition: Any | None = None) -> tuple[str, str]:
    """(module code defining ``run``, ksearch language) from a Solution JSON; see the module docstring for limits."""
    solution = solution_from_json(text)
    language = str(getattr(solution.spec.language, "value", solution.spec.language))
    if language not in ("python", "triton"):
        raise FlashInferError(
            f"solution {solution.name!r} is {language}: ksearch evaluates Python modules only (Triton, or CUDA through "
            "torch.utils.cpp_extension.load_inline); raw cpp/cuda/tilelang Solutions are not supported"
        )
    if len(solution.sources) != 1:
        paths = ", ".join(s.path for s in solution.sources)
        raise FlashInferError(
            f"solution {solution.name!r} has {len(solution.sources)} source files ({paths}): only one is supported"
        )
    entry_file, _, symbol = solution.spec.entry_point.partition("::")
    source = solution.sources[0]
    if source.path != entry_file:
        raise FlashInferError(f"solution {solution.name!r}: entry file {entry_file} is not its source {source.path}")
    ksearch_language = "triton" if language == "triton" or "import triton" in source.content else "cuda"
    code = source.content
    if solution.spec.destination_passing_style:
        if definition is None:
            raise FlashInferError(
                f"solution {solution.name!r} is destination-passing: its definition is needed to wrap it"
            )
        code += _dps_wrapper(definition, symbol)
    elif symbol != "run":
        code += f"\n\nrun = {symbol}  # added by ksearch: the Solution's entry point\n"
    return code, ksearch_language


def _dps_wrapper(definition: Any, symbol: str) -> str:
    """Code appended to a DPS solution: ``run(*inputs)`` allocates the outputs, calls the entry point, returns them."""
    bindings = {axis: [name, dim] for axis, (name, dim) in definition.var_axes_bindings.items()}
    inputs = list(definition.inputs)
    outputs = {
        name: {"shape": list(t.shape or []), "dtype": str(getattr(t.dtype, "value", t.dtype))}
        for name, t in definition.outputs.items()
    }
    entry = "_ksearch_dps_entry"
    return f"""


# -- added by ksearch: value-returning wrapper around the destination-passing entry point ------------------------
import torch as _ksearch_torch

{entry} = {symbol}
_KSEARCH_INPUTS = {inputs!r}
_KSEARCH_CONST = {dict(definition.const_axes)!r}
_KSEARCH_BINDINGS = {bindings!r}
_KSEARCH_OUTPUTS = {outputs!r}


def run(*inputs):
    axes = dict(_KSEARCH_CONST)
    for axis, (name, dim) in _KSEARCH_BINDINGS.items():
        axes[axis] = inputs[_KSEARCH_INPUTS.index(name)].shape[dim]
    device = next(x.device for x in inputs if isinstance(x, _ksearch_torch.Tensor))
    outs = [
        _ksearch_torch.empty(
            [axes[a] for a in spec["shape"]], dtype=getattr(_ksearch_torch, spec["dtype"]), device=device
        )
        for spec in _KSEARCH_OUTPUTS.values()
    ]
    {entry}(*inputs, *outs)
    return outs[0] if len(outs) == 1 else tuple(outs)
"""
