"""Task files loaded in a process that does not hold the API key (issue 61).

A process whose environment holds a secret-named variable (``OPENAI_API_KEY``, ``*_TOKEN``: ``redaction``'s names)
never imports a task file (``_loading.import_file`` refuses): ``load`` starts ``python -P -m
ksearch.tasks.keyless_loader`` with an environment rebuilt from an allowlist (no secret-named variable, its own HOME
and TMPDIR), which imports the file, validates it when asked, and writes the task's ``TaskDescription`` to a file; the
caller gets a ``DescribedTask``. Before it starts, the caller is made non-dumpable (unless ``KSEARCH_SANDBOX=off``):
its own ``/proc`` entries (``environ`` holds the key it started with) become root's, out of the loader's reach.

The evaluator's worker and checker start without the key, so they import the file themselves, as before.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import ksearch
from ksearch import settings
from ksearch.contracts.candidate import Candidate
from ksearch.errors import TaskNotFoundError, UserError
from ksearch.redaction import SECRET_NAME, holds_secret
from ksearch.tasks.base import Task, TaskConfig, device_kind
from ksearch.tasks.described import TaskDescription

LOAD_TIMEOUT_S = 600.0
"""Importing torch and the file, and validating its reference (on a GPU: CUDA's start)."""
ENV_KEPT = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_HOME",
        "CUDA_PATH",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "KERNELBENCH_ROOT",
        "FIB_DATASET_PATH",
        "TRITON_INTERPRET",
    }
)
PR_SET_DUMPABLE = 4

_lock = threading.Lock()
_cache: dict[tuple[str, str | None], tuple[TaskDescription, dict[str, str]]] = {}


def holds_key(environ: dict[str, str] | None = None) -> bool:
    """Whether this process's environment holds a secret-named variable with a value (an API key, a token)."""
    return holds_secret(environ)


def load(name: str, *, kernelbench_root: str | Path | None = None, validate_on: str | None = None) -> DescribedTask:
    """The task called ``name`` (a task file's name), loaded in a process without the key; validated on
    ``validate_on`` when given. Errors are the loader's own (``TaskNotFoundError``, ``ProblemFormatError``...)."""
    key = (name, str(kernelbench_root) if kernelbench_root else None)
    with _lock:
        cached = _cache.get(key)
    if validate_on is None and cached is not None and _digests(cached[0].data_paths) == cached[1]:
        return DescribedTask(cached[0])
    description = _run(name, kernelbench_root, validate_on)
    with _lock:
        _cache[key] = (description, _digests(description.data_paths))
    return DescribedTask(description)


def validate(name: str, device: str) -> None:
    """Validate the task called ``name`` on ``device`` in a process without the key (``Task.validate``)."""
    load(name, validate_on=device)


def _digests(paths: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for path in paths:
        try:
            found[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest() if Path(path).is_file() else "folder"
        except OSError:
            found[path] = "unreadable"
    return found


def loader_environment(home: Path) -> dict[str, str]:
    """The loader's environment: an allowlist of this one's, no secret-named variable, its own HOME and TMPDIR."""
    env = {k: v for k, v in os.environ.items() if (k in ENV_KEPT or k.startswith("LC_")) and not SECRET_NAME.search(k)}
    root = str(Path(ksearch.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.update(
        HOME=str(home),
        TMPDIR=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
    )
    return env


def protect_this_process() -> None:
    """Non-dumpable (as ``containment.policy.protect_parent`` makes the agent), unless ``KSEARCH_SANDBOX=off``."""
    if settings.SANDBOX.raw().strip().lower() in ("off", "0", "none"):
        return
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _run(name: str, kernelbench_root: str | Path | None, validate_on: str | None) -> TaskDescription:
    protect_this_process()
    with tempfile.TemporaryDirectory(prefix="ksearch-task-") as folder:
        home = Path(folder)
        out = home / "description.json"
        argv = [sys.executable, "-P", "-m", "ksearch.tasks.keyless_loader", name, str(out)]
        argv += ["--kernelbench-root", str(kernelbench_root)] if kernelbench_root else []
        argv += ["--validate", validate_on] if validate_on else []
        try:
            done = subprocess.run(
                argv,
                cwd=os.getcwd(),  # a relative name is the caller's
                env=loader_environment(home),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=LOAD_TIMEOUT_S,
                check=False,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            raise UserError(f"loading task {name} took more than {LOAD_TIMEOUT_S:g} s") from None
        try:
            answer = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = (done.stderr or done.stdout or "").strip()[-800:]
            raise UserError(f"loading task {name} failed (exit {done.returncode}): {tail}") from None
    if not answer.get("ok"):
        raise _error(answer)
    return TaskDescription.model_validate(answer["description"])


def _error(answer: dict) -> UserError:
    """The loader's error, as the class it raised where this process knows it."""
    from ksearch.tasks._loading import ProblemFormatError
    from ksearch.tasks.kernelbench import UnjudgeableProblem

    kinds: dict[str, type[UserError]] = {
        "TaskNotFoundError": TaskNotFoundError,
        "ProblemFormatError": ProblemFormatError,
        "UnjudgeableProblem": UnjudgeableProblem,
    }
    error = kinds.get(str(answer.get("kind")), UserError)(str(answer.get("error", "the task could not be loaded")))
    if answer.get("hint"):
        error.hint = str(answer["hint"])
    return error


class NotLoadedHere(RuntimeError):
    """The task's code is not in this process (it holds the API key): only the evaluator's worker and checker run
    it."""


class DescribedTask(Task):
    """A task known by its description only (``TaskDescription``): the agent's and the evaluator parent's view."""

    def __init__(self, description: TaskDescription) -> None:
        d = description
        self.description = d
        self.name, self.title, self.entry_point, self.languages = d.name, d.title, d.entry_point, d.languages
        self.atol, self.rtol = d.atol, d.rtol
        self.timing_methods, self.default_timing_method = d.timing_methods, d.default_timing_method
        self.flush_l2, self.output_is_tuple, self.allow_nonfinite = d.flush_l2, d.output_is_tuple, d.allow_nonfinite
        self.data_parameters = d.data_parameters
        self.roofline_compute_dtype, self.roofline_evidence_dtype = d.roofline_compute_dtype, d.roofline_evidence_dtype
        self.gpumode_problem, self.reference_class = d.gpumode_problem, d.reference_class
        self.allowed_rules, self.forbidden_calls = d.allowed_rules, d.forbidden_calls
        self.pytorch_baseline_modes = d.pytorch_baseline_modes
        self.path = d.path
        self.source = d.reference_source
        """A KernelBench problem's text (its baselines package it as a candidate)."""
        self._work = {w.config.model_dump_json(): (w.flops, w.bytes_moved) for w in d.work}

    def spec(self, language: str) -> str:
        if language not in self.description.specs:
            raise ValueError(f"task {self.name!r} has no spec for language {language!r}; it supports {self.languages}")
        return self.description.specs[language]

    def reference_source(self) -> str:
        return self.description.reference_source

    def definition_digest(self) -> str:
        return self.description.definition_digest

    def test_configs(self, device: str) -> list[TaskConfig]:
        return list(self.description.test_configs[device_kind(device)])

    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        return list(self.description.benchmark_configs[device_kind(device)])

    def resource_configs(self) -> list[TaskConfig]:
        return list(self.description.resource_configs)

    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        return self._work.get(config.model_dump_json(), (0.0, 0.0))

    def device_note(self, device: str) -> str:
        return self.description.device_notes.get(device_kind(device), "")

    def starter_code(self, language: str) -> str | None:
        return self.description.starter_code.get(language)

    def support_modules(self) -> dict[str, str]:
        return dict(self.description.support_modules)

    def data_paths(self) -> tuple[str, ...]:
        return self.description.data_paths

    def reference_candidate(self) -> Candidate | None:
        return self.description.reference_candidate

    def reference_latencies_ms(self) -> dict[str, float]:
        return dict(self.description.reference_latencies_ms)

    def flashinfer_definition(self) -> str | None:
        return self.description.flashinfer_definition

    def validate(self, device: str = "cpu") -> None:
        validate(self.name, device)

    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        raise NotLoadedHere(f"task {self.name}: its inputs are made in the evaluator's processes, not here")

    def reference(self, *inputs: Any) -> Any:
        raise NotLoadedHere(f"task {self.name}: its reference runs in the evaluator's checker, not here")

    def prepare(self, module: Any, config: TaskConfig, device: str) -> Any:
        raise NotLoadedHere(f"task {self.name}: candidates run in the evaluator's worker, not here")
