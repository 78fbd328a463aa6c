"""The resource reader under issue 59's rule: the figures of a candidate's compiled Triton kernels (registers, shared
memory, spills) are read from Triton's own objects by exact type, so no method, property, comparison or formatting of
an object the candidate made runs in the harness, and nothing it defines is read. Objects that record every call made
on them sit where the reader looks (the module's globals, the kernel's wrappers, its per-device cache of compiled
kernels), beside an honest kernel whose figures are still read: compiled for an H100 on the CPU, run under the
interpreter, and (GPU-marked) loaded on a GPU, where the driver's registers are read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

from triton.compiler.compiler import CompiledKernel  # noqa: E402
from triton.runtime.autotuner import Autotuner, Heuristics  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from ksearch.tools.evaluator.shared.resources import (  # noqa: E402
    candidate_kernels,
    cuobjdump_path,
    kernel_resources,
    loaded_resources,
)
from ksearch.tools.evaluator.shared.triton_objects import module_kernels  # noqa: E402

HONEST = (Path(__file__).resolve().parents[1] / "tasks" / "data" / "softmax_triton_ok.py").read_text()
CALLS: list[str] = []
"""Every call the harness made on an object of the candidate's (must stay empty)."""


class _Meta(type):
    """A metaclass that answers isinstance checks, comparisons, hashing and attribute reads with code of its own."""

    def __instancecheck__(cls, instance: object) -> bool:
        CALLS.append("metaclass __instancecheck__")
        return True

    def __subclasscheck__(cls, subclass: type) -> bool:
        CALLS.append("metaclass __subclasscheck__")
        return True

    def __eq__(cls, other: object) -> bool:
        CALLS.append("metaclass __eq__")
        return True

    def __hash__(cls) -> int:
        CALLS.append("metaclass __hash__")
        return 0

    def __getattribute__(cls, name: str) -> Any:
        CALLS.append(f"metaclass read {name}")
        return type.__getattribute__(cls, name)


class _Trap(metaclass=_Meta):
    """Records every attribute read, comparison, conversion and formatting the harness makes of it."""

    def __getattribute__(self, name: str) -> Any:
        CALLS.append(f"read {name}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        CALLS.append(f"missing {name}")
        return _Trap()

    def __eq__(self, other: object) -> bool:
        CALLS.append("__eq__")
        return True

    def __hash__(self) -> int:
        CALLS.append("__hash__")
        return 0

    def __bool__(self) -> bool:
        CALLS.append("__bool__")
        return True

    def __len__(self) -> int:
        CALLS.append("__len__")
        return 1

    def __iter__(self) -> Iterator[Any]:
        CALLS.append("__iter__")
        return iter([])

    def __format__(self, spec: str) -> str:
        CALLS.append("__format__")
        return "trap"

    def __str__(self) -> str:
        CALLS.append("__str__")
        return "trap"

    __repr__ = __str__


class _Disguised(_Trap):
    """Says it is a JIT function when asked for its ``__class__``."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: PLE0307
        CALLS.append("property __class__")
        return JITFunction


class FutureKernel(_Trap):
    """Named like Triton's unfinished compile (a reader that matched the class's name read it)."""


class _TrapInt(int):
    def __int__(self) -> int:
        CALLS.append("__int__")
        return 1

    def __index__(self) -> int:
        CALLS.append("__index__")
        return 1

    def __eq__(self, other: object) -> bool:
        CALLS.append("int __eq__")
        return True

    __hash__ = int.__hash__


class _PropertyKernel(CompiledKernel):
    """A compiled kernel's subclass whose figures are properties."""

    @property
    def metadata(self) -> Any:  # type: ignore[override]
        CALLS.append("property metadata")
        return _Trap()


class _LyingTuner(Autotuner):
    """An autotuner's subclass whose wrapped kernel is a property."""

    @property
    def fn(self) -> Any:  # type: ignore[override]
        CALLS.append("property fn")
        return _Trap()


class _LyingCaches(defaultdict):
    def values(self) -> Any:  # type: ignore[override]
        CALLS.append("caches values")
        return super().values()


class _LyingDict(dict):
    def get(self, key: Any, default: Any = None) -> Any:
        CALLS.append(f"dict get {key}")
        return super().get(key, default)


class _RecordingModule(ModuleType):
    def __getattribute__(self, name: str) -> Any:
        CALLS.append(f"module read {name}")
        return ModuleType.__getattribute__(self, name)


def _forged_compiled(**fields: Any) -> CompiledKernel:
    kernel = object.__new__(CompiledKernel)
    vars(kernel).update({"module": None, "_module_pid": None, **fields})  # Triton's __del__ reads these two
    return kernel


def _fake_jit(**fields: Any) -> JITFunction:
    jit = object.__new__(JITFunction)
    vars(jit).update(fields)
    return jit


def _cache_traps() -> dict[str, Any]:
    """Look-alikes of compiled kernels, for a JIT function's per-device cache."""
    trap_metadata = type("KernelMetadata", (tuple,), {"_fields": ("shared", "name", "num_warps", "num_stages")})
    property_kernel = object.__new__(_PropertyKernel)
    vars(property_kernel).update(module=None, _module_pid=None)
    return {
        "trap": _Trap(),
        "disguised": _Disguised(),
        "future_by_name": FutureKernel(),
        "forged_trap_metadata": _forged_compiled(metadata=_Trap(), module=object(), n_regs=_TrapInt(7)),
        "forged_tuple_metadata": _forged_compiled(metadata=trap_metadata((_TrapInt(1), _Trap(), 4, 3)), asm=_Trap()),
        "property_kernel": property_kernel,
    }


def _place_traps(module: ModuleType, honest: Any) -> None:
    """Objects that record every call where the reader looks: the module's globals, the wrappers around a kernel, the
    honest kernel's own cache of compiled kernels, and JIT functions whose fields lie."""
    device_caches = vars(honest).get("device_caches")
    if device_caches is not None:  # a compiled JIT function (not the interpreter's): its caches get look-alikes
        for entry in dict.values(device_caches):
            entry[0].update(_cache_traps())
    tuner = object.__new__(Autotuner)
    vars(tuner).update(fn=_Trap(), configs=[])
    heuristics = object.__new__(Heuristics)
    vars(heuristics).update(fn=_Disguised())
    lying_tuner = object.__new__(_LyingTuner)
    vars(lying_tuner).update(fn=honest)
    lying_fields = object.__new__(JITFunction)
    lying_fields.__dict__ = _LyingDict(device_caches={0: (_cache_traps(), {}, None, None, None)})
    traps = {
        "trap": _Trap(),
        "disguised": _Disguised(),
        "meta_class": _Trap,
        "future_by_name": FutureKernel(),
        "tuner_of_trap": tuner,
        "heuristics_of_disguised": heuristics,
        "lying_tuner": lying_tuner,
        "lying_fields": lying_fields,
        "lying_caches": _fake_jit(device_caches=_LyingCaches(None, {0: (_cache_traps(),)})),
        "forged_cache": _fake_jit(device_caches={0: (_cache_traps(), {}, None, None, None)}),
        "cache_of_trap": _fake_jit(device_caches=_Trap()),
    }
    for name, value in traps.items():
        setattr(module, name, value)


def _load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, *, interpret: bool) -> ModuleType:
    monkeypatch.setenv("TRITON_INTERPRET", "1" if interpret else "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    (tmp_path / f"{name}.py").write_text(HONEST)
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__(name)
    module = sys.modules[name]
    monkeypatch.delitem(sys.modules, name)
    return module


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    CALLS.clear()


def _compiled_on_the_cpu(folder: Path) -> dict[str, Any]:
    """In a process without the interpreter (Triton cannot switch modes once its language is imported): the honest
    kernel compiled for an H100 as the resource probe compiles it, the traps placed, and what the reader made of it."""
    from ksearch.tools.evaluator.worker.aot import aimed_at, recording
    from ksearch.tools.gpu_specs import gpu_spec

    (folder / "honest_compiled.py").write_text(HONEST)
    sys.path.insert(0, str(folder))
    import honest_compiled as module

    honest = module._softmax_row
    with aimed_at(gpu_spec("h100")), recording(1) as compiled:
        module.kernel(torch.randn(4, 100))
    _place_traps(module, honest)
    CALLS.clear()
    found = candidate_kernels(module)
    loaded = loaded_resources(module)
    look_alikes = [kernel_resources(value) for value in _cache_traps().values()]
    return {
        "calls": list(CALLS),
        "honest_found": any(kernel is honest for kernel in found),
        "loaded": [r.model_dump() for r in loaded],
        "probed": [r.model_dump() for r in compiled.resources()],
        "look_alikes": [r is None for r in look_alikes],
        "cuobjdump": cuobjdump_path() is not None,
    }


def test_a_kernel_compiled_for_an_h100_on_the_cpu_is_read_and_no_object_of_the_candidates_runs(
    tmp_path: Path,
) -> None:
    """The honest kernel is compiled for an H100 (no GPU needed, as the resource probe does); its cache then also holds
    look-alikes of compiled kernels, and the module objects of every kind that would run code if read. The reader
    runs none of them, reads the honest kernel's shared memory, warps and stages, and nothing of the look-alikes."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "triton-cache")}
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["calls"] == []
    assert seen["honest_found"]
    [figure] = seen["loaded"]
    assert (figure["name"], figure["num_warps"], figure["num_stages"], figure["tuned"]) == ("_softmax_row", 4, 3, False)
    assert figure["registers"] is None and figure["spilled_bytes"] is None  # compiled, not loaded: no driver figures
    [probed] = seen["probed"]  # the probe's reading of the same compile (its cubin read with cuobjdump)
    assert probed["shared_bytes"] == figure["shared_bytes"]
    if seen["cuobjdump"]:
        assert probed["registers"] > 0 and probed["spilled_bytes"] == 0
    assert all(seen["look_alikes"])


def test_under_the_interpreter_the_kernel_runs_and_the_reader_runs_nothing_of_the_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU under ``TRITON_INTERPRET=1`` nothing is compiled: the honest kernel runs (and is found by name),
    no figure is claimed, and none of the look-alikes around it runs any code."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's mode is the process's, set before it is imported: this process compiles")
    module = _load(tmp_path, monkeypatch, "honest_interpreted", interpret=True)
    x = torch.randn(4, 100)
    torch.testing.assert_close(module.kernel(x), torch.softmax(x, dim=1))
    _place_traps(module, module._softmax_row)
    CALLS.clear()

    assert [k.name for k in module_kernels(module) if k.name is not None] == ["_softmax_row"]
    honest = module._softmax_row  # the interpreter's function, which has no compiled binaries
    assert not any(kernel is honest for kernel in candidate_kernels(module))
    assert loaded_resources(module) == []
    assert CALLS == []


def test_a_module_whose_class_was_replaced_is_not_read() -> None:
    """A candidate can give its own module a class of its own: its globals are then not read at all."""
    module = _RecordingModule("swapped")
    module.kernel = _Trap()
    CALLS.clear()
    assert loaded_resources(module) == [] and candidate_kernels(module) == [] and module_kernels(module) == []
    assert CALLS == []


@pytest.mark.gpu
def test_on_a_gpu_the_drivers_registers_are_read_and_no_object_of_the_candidates_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded on a GPU, the honest kernel's registers and local memory are the driver's; the look-alikes in its
    cache and module run nothing and add no figure."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    module = _load(tmp_path, monkeypatch, "honest_loaded", interpret=False)
    x = torch.randn(64, 1000, device="cuda")
    torch.testing.assert_close(module.kernel(x), torch.softmax(x, dim=1))
    torch.cuda.synchronize()
    _place_traps(module, module._softmax_row)
    CALLS.clear()

    [figure] = loaded_resources(module)
    assert CALLS == []
    assert figure.name == "_softmax_row" and figure.num_warps == 4
    assert figure.registers is not None and figure.registers > 0 and figure.spilled_bytes == 0


if __name__ == "__main__":
    print(json.dumps(_compiled_on_the_cpu(Path(sys.argv[1]))))
