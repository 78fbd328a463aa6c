"""Task files loaded in a process that does not hold the API key (issue 61).

A process whose environment holds a secret-named variable (``OPENAI_API_KEY``, ``*_TOKEN``: ``redaction``'s names)
never imports a task file (``_loading.import_file`` refuses): ``load`` starts ``python -P -m ksearch.tasks.keyless``
with an environment rebuilt from an allowlist (no secret-named variable, its own HOME and TMPDIR), which imports the
file, validates it when asked, and writes the task's ``TaskDescription`` to a file; the caller gets a
``DescribedTask``. Before it starts, the caller is made non-dumpable (unless ``KSEARCH_SANDBOX=off``): its own
``/proc`` entries (``environ`` holds the key it started with) become root's, out of the loader's reach.

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

import ksearch
from ksearch.errors import TaskNotFoundError, UserError
from ksearch.redaction import MIN_SECRET_LENGTH, SECRET_NAME
from ksearch.tasks.described import DescribedTask, TaskDescription

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
    env = os.environ if environ is None else environ
    return any(SECRET_NAME.search(k) and len(v.strip()) >= MIN_SECRET_LENGTH for k, v in env.items())


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
    if os.environ.get("KSEARCH_SANDBOX", "").strip().lower() in ("off", "0", "none"):
        return
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _run(name: str, kernelbench_root: str | Path | None, validate_on: str | None) -> TaskDescription:
    protect_this_process()
    with tempfile.TemporaryDirectory(prefix="ksearch-task-") as folder:
        home = Path(folder)
        out = home / "description.json"
        argv = [sys.executable, "-P", "-m", "ksearch.tasks.keyless", name, str(out)]
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


def main(argv: list[str]) -> int:
    """The loader: ``NAME OUT [--kernelbench-root DIR] [--validate DEVICE]``; writes its answer to OUT."""
    from ksearch.tasks.described import describe
    from ksearch.tasks.registry import resolve_task

    name, out, rest = argv[0], Path(argv[1]), argv[2:]
    options = dict(zip(rest[::2], rest[1::2], strict=False))
    if holds_key():
        answer: dict = {"ok": False, "error": "the task loader was started with a secret-named variable"}
    else:
        try:
            task = resolve_task(name, kernelbench_root=options.get("--kernelbench-root"))
            if "--validate" in options:
                task.validate(options["--validate"])
            answer = {"ok": True, "description": describe(task).model_dump(mode="json")}
        except UserError as exc:
            answer = {"ok": False, "kind": type(exc).__name__, "error": str(exc), "hint": exc.hint}
    out.write_text(json.dumps(answer), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
