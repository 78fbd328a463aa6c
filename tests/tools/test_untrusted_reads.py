"""The worker's other reads of objects the candidate made or could have replaced (issue 59): its exceptions, the
results a ghost replay poisons, the tensors it held, its autotuners. Each object here records every method,
property, comparison, hash or formatting run on it; the harness's reads run none of them and still read what an
honest object holds."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ksearch.tools.evaluator.shared import tensor_access as ta
from ksearch.tools.evaluator.shared.object_access import exception_message, exception_text

CALLS: list[str] = []


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    CALLS.clear()


class _Meta(type):
    """A metaclass that answers attribute reads of the class, comparisons and hashing with code of its own."""

    def __getattribute__(cls, name: str) -> Any:
        CALLS.append(f"metaclass read {name}")
        return type.__getattribute__(cls, name)

    def __eq__(cls, other: object) -> bool:
        CALLS.append("metaclass __eq__")
        return True

    def __hash__(cls) -> int:
        CALLS.append("metaclass __hash__")
        return 0


class _Trap(metaclass=_Meta):
    def __getattribute__(self, name: str) -> Any:
        CALLS.append(f"read {name}")
        return object.__getattribute__(self, name)

    def __str__(self) -> str:
        CALLS.append("__str__")
        return "trap"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        CALLS.append("__format__")
        return "trap"


class _LyingTensor(_Trap):
    """Says it is a tensor when asked for its ``__class__``, and answers every method."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: PLE0307
        CALLS.append("property __class__")
        return torch.Tensor

    def __getattr__(self, name: str) -> Any:
        CALLS.append(f"missing {name}")
        return lambda *args, **kwargs: 1


class CompilationError(Exception, metaclass=_Meta):  # noqa: N818 - named like Triton's on purpose
    """An exception of the candidate's named and placed like Triton's, with a message that formats itself."""

    __module__ = "triton.compiler.errors"

    def __getattribute__(self, name: str) -> Any:
        CALLS.append(f"exception read {name}")
        return Exception.__getattribute__(self, name)

    def __str__(self) -> str:
        CALLS.append("exception __str__")
        return "forged"


class _TrapList(list):
    def __iter__(self) -> Any:
        CALLS.append("list __iter__")
        return super().__iter__()


class _TrapStr(str):
    def __hash__(self) -> int:
        CALLS.append("str __hash__")
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        CALLS.append("str __eq__")
        return str.__eq__(self, other)

    def __lt__(self, other: str) -> bool:
        CALLS.append("str __lt__")
        return str.__lt__(self, other)


class _TrapDict(dict):
    def __iter__(self) -> Any:
        CALLS.append("dict __iter__")
        return iter([])

    def keys(self) -> Any:  # type: ignore[override]
        CALLS.append("dict keys")
        return []


def test_a_compile_error_is_known_by_tritons_classes_not_by_what_the_candidates_exception_says() -> None:
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources

    from ksearch.tools.evaluator.worker.guard import is_compile_error

    forged = CompilationError("boom")
    CALLS.clear()
    assert not is_compile_error(forged)
    assert CALLS == []
    assert is_compile_error(CompileTimeAssertionFailure(None, None, "static_assert failed"))
    assert is_compile_error(OutOfResources(300000, 232448, "shared memory")) and not is_compile_error(ValueError())


def test_an_exceptions_text_is_read_without_running_its_code() -> None:
    from triton.compiler.errors import CompilationError as TritonCompilationError

    forged = CompilationError("boom", _Trap(), 3)
    CALLS.clear()
    assert exception_text(forged) == "CompilationError: ('boom', <_Trap>, 3)"
    assert exception_message(CompilationError(_Trap())) == "<_Trap>"
    assert CALLS == []
    assert exception_text(RuntimeError("CUDA error: out of memory")) == "RuntimeError: CUDA error: out of memory"
    assert exception_text(ValueError()) == "ValueError"
    compile_error = TritonCompilationError("x = tl.load(p)", None, "unsupported type")
    assert exception_message(compile_error) == str(compile_error)  # Triton keeps its text in ``message``


def test_the_probe_notes_a_failed_compile_without_running_the_candidates_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import triton.compiler
    from triton.compiler.compiler import ASTSource

    from ksearch.tools.evaluator.worker.aot import recording

    def failing(src: Any, *args: Any, **kwargs: Any) -> Any:
        raise CompilationError("line 1\nptxas: too many resources")

    monkeypatch.setattr(triton.compiler, "compile", failing)
    source = object.__new__(ASTSource)
    vars(source).update(name="_proj_gemm", fn=_Trap())
    with recording(1) as compiled:
        CALLS.clear()
        for src in (source, _Trap()):  # the second is no Triton source: the kernel's name is unknown
            try:
                triton.compiler.compile(src, target=None)
            except BaseException:  # noqa: BLE001 - matched by type in C: nothing of the exception runs
                pass
        after = list(CALLS)
    assert after == []
    assert compiled.failures == [
        "_proj_gemm: CompilationError: ptxas: too many resources",
        "kernel: CompilationError: ptxas: too many resources",
    ]


def test_a_ghost_replay_records_what_the_candidate_raised_without_running_it() -> None:
    from ksearch.tools.evaluator.worker.work_observed import ghost

    def call() -> None:
        raise CompilationError("no launch")

    result, trace = ghost(call)
    assert result is None and trace.raised == "CompilationError: no launch"
    assert CALLS == []


def test_poisoning_reads_a_result_by_type_only() -> None:
    """A ghost replay's result may be the candidate's objects: a list with an ``__iter__`` of its own, an object
    that says it is a tensor. The real tensors in it are poisoned and nothing of the rest runs."""
    from ksearch.tools.evaluator.worker.work_observed import _largest, _leaves_the_device, _poison

    real, count = torch.zeros(4), torch.zeros(3, dtype=torch.int32)
    lying = _LyingTensor()
    value = _TrapList([real, lying, (count, _Trap())])
    CALLS.clear()
    _poison(value)
    _poison(lying)
    assert _largest((value,), {"out": lying}, lying) == 4
    assert not _leaves_the_device((value,), lying)
    assert CALLS == []
    assert torch.isnan(real).all()
    assert count.tolist() == [0, 0, 0]  # only the first level of a result is poisoned, as before


def test_a_type_whose_metaclass_compares_is_no_tensor_and_runs_nothing() -> None:
    class Unrelated(metaclass=_Meta):
        pass

    value = Unrelated()
    CALLS.clear()
    assert not ta.is_tensor(value) and not ta.is_tensor(_LyingTensor()) and ta.is_tensor(torch.zeros(1))
    assert CALLS == []


def test_an_inputs_own_attributes_are_read_without_hashing_or_comparing_its_keys() -> None:
    tensor = torch.zeros(2)
    vars(tensor)[_TrapStr("detach")] = lambda: None
    vars(tensor)["_dynamo_dynamic_indices"] = {0}
    replaced = torch.zeros(2)
    replaced.__dict__ = _TrapDict(fill_=1)
    CALLS.clear()
    assert ta.shadowing_attributes(tensor) == ["detach"]
    assert type(ta.shadowing_attributes(tensor)[0]) is str
    assert ta.own_attributes(tensor) == ["detach", "_dynamo_dynamic_indices"]
    assert ta.shadowing_attributes(replaced) == ["__dict__"] == ta.own_attributes(replaced)
    assert CALLS == []


def test_the_new_values_of_an_audit_fit_an_input_read_by_type_only() -> None:
    from ksearch.tools.evaluator.worker.timing_runner import _fits_in_place

    class Relabelled(torch.Tensor):
        @property
        def shape(self) -> Any:  # type: ignore[override]
            CALLS.append("property shape")
            return torch.Size([5])

    held = torch.zeros(3)
    held.__class__ = Relabelled  # what a kernel can do to a tensor it is given
    CALLS.clear()
    assert _fits_in_place(held, torch.ones(3))
    assert not _fits_in_place(held, torch.ones(5)) and not _fits_in_place(_LyingTensor(), torch.ones(3))
    assert CALLS == []


def test_the_interpreters_first_config_is_kept_without_reading_the_autotuner_through_its_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under the interpreter an autotuner keeps its first config; a subclass's ``__getattribute__`` does not run."""
    from triton.runtime import autotuner

    from ksearch.tools.evaluator.worker.worker_process import interpret_autotune_with_first_config

    def tritons_init(self: Any, *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, "configs", ["first", "second", "third"])

    monkeypatch.setattr(autotuner.Autotuner, "__init__", tritons_init)
    interpret_autotune_with_first_config()

    class Watching(autotuner.Autotuner):
        def __getattribute__(self, name: str) -> Any:
            CALLS.append(f"read {name}")
            return object.__getattribute__(self, name)

    tuner = Watching()
    assert CALLS == []
    assert object.__getattribute__(tuner, "__dict__")["configs"] == ["first"]


def test_an_autotuners_cache_is_read_without_hashing_its_keys() -> None:
    """At the end of the correctness pass the short benchmark's choices are forgotten: a key of other values than
    Triton's plain ones is left alone rather than hashed, and the autotuner is read through Triton's class."""
    from triton.runtime.autotuner import Autotuner

    from ksearch.tools.evaluator.worker import tuning

    class Watching(Autotuner):
        def __getattribute__(self, name: str) -> Any:
            CALLS.append(f"read {name}")
            return object.__getattribute__(self, name)

    tuner = object.__new__(Watching)
    trap_key = (_TrapStr("n"),)
    object.__getattribute__(tuner, "__dict__")["cache"] = {(128, "torch.float32"): "a", trap_key: "b"}
    CALLS.clear()
    fields = tuning._fields(tuner)
    keys = tuning._keys(fields["cache"])
    assert [tuning._plain_key(key) for key in keys] == [True, False]
    assert CALLS == []
