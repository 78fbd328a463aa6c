"""Static integrity checks: reject candidate source that tries to game the evaluator, before any of it runs.

``check_source(code)`` parses the module with ``ast`` (never imports or executes it) and returns the first broken rule
as a ``Rejection`` or None. Rules have stable names (they are stored with evaluations and shown to the LLM), ordered by
priority: when several fire, the first in ``RULES`` is reported. The checks are a pre-filter, not the defence: the
worker's dynamic checks (fresh process, inputs checked unchanged, outputs rechecked, device-wide sync before the end
timestamp) still apply to whatever passes here. False positives cost a good kernel, so every rule matches *use* of a
dangerous facility (an import, a call, an assignment), resolved through import aliases, and never mere words in
comments; the only text rules look inside string constants (CUDA/C++ sources for ``load_inline``).

Modules, one job each:

- ``vocabulary``: the rule names (``RULES``), ``matches``, and the module, call, attribute and text patterns the rules
  about the process match; ``compute_vocabulary``: those of the rules about where a result comes from (library ops,
  graphs, subclasses, caching);
- ``base``: ``Finding`` and ``ScannerBase``, the parsed module with import aliases, containers and parents resolved;
- ``processes``: threads, processes, harness introspection, and every import;
- ``streams``: side streams, CUDA graphs, tensor subclasses;
- ``writes``: the environment, dynamic code, monkeypatching assignments, file writes;
- ``sources``: string constants (CUDA/C++ sources, paths, commands);
- ``caching``: outputs cached by an input's identity or content;
- ``library``: the library op the task forbids, and falling back to the reference;
- ``reference_ops``: KernelBench candidates that call the reference's PyTorch ops or launch no kernel of their own
  (the op names it judges by, and ``canonical``, in ``reference_op_names``);
- ``scanner``: ``Scanner``, the walk that sends each node to the families that judge it.

Honest leaderboard patterns the rules let through (the corpus in ``tests/tools/honest/`` keeps them honest), each
narrowed to the harmless form so the nearby hack is still caught:

- ``threading.Lock`` / ``RLock`` (a lazy ``load_inline`` build guarded by a lock): ``import threading`` passes when
  every use of the module is ``.Lock``/``.RLock`` (``SAFE_THREADING``); any other use (``Thread``, ``Timer``,
  ``getattr(threading, ...)``, the module passed around) or no use at all is still ``thread_injection``.
- Build variables (``BUILD_ENV_VARS``: ``TORCH_CUDA_ARCH_LIST``, ``MAX_JOBS``, nvcc flags) read, tested or set by a
  constant name; any other key, a computed key, or the environment as a whole is still ``environment_access``.
- Derived weights cached in the weights dict under a constant key. ``output_caching`` now also follows the names
  bound to an input (``x, mask, weights, config = data``, ``x.contiguous()``) and the input dicts themselves: keyed
  by an input's identity or content, the entry point returning what it stored (``w[k] = y; ... return w[k]``) or an
  input dict's value under a key the module stores (``return weights["_out"]``) is refused.
- Derived weights cached in a module-level table keyed by the weights' identity (``W[weights["w"].data_ptr()]``),
  for tasks that say which positions of the entry point's ``data`` are parameters (``Task.data_parameters``; TriMul's
  weights dict and config): a key built only from names bound to those positions (and values passed on from them) is
  a weight cache. A key that touches an activation (``x``, the mask, ``data`` as a whole) is still refused, and an
  entry point returning what it stored is still refused whatever its key. A table keyed by a weight but holding an
  output is caught at run time: the activations are re-randomised in place after every timing loop.
- ``functools.lru_cache``/``cache`` on helpers of ints: still refused on the entry point, and now also on a function
  annotated to take a tensor or called with an input (or its identity) — lru_cache keys tensors by identity. A
  helper's parameter holds a tensor when annotated so, used through a tensor-only attribute, or passed one by a
  caller.
- A top-level ``if __name__ == "__main__":`` self-test may call the op the task forbids (it never runs on import),
  unless the module binds ``__name__`` itself.
- Assignments are judged by what they store to: ``y[torch.arange(n)] = 0`` and ``cache[(n, torch.float16)] = t``
  write ``y`` and ``cache``, not ``torch``; writing into a module's table (``torch.x.__dict__[k] = f``) still patches
  it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ksearch import pyparse
from ksearch.contracts.evaluation import Rejection
from ksearch.tools.integrity import reference_ops
from ksearch.tools.integrity.base import Finding
from ksearch.tools.integrity.compute_vocabulary import ALLOWED_TORCH_CALLS, TASK_FORBIDDEN_CALLS
from ksearch.tools.integrity.scanner import Scanner
from ksearch.tools.integrity.vocabulary import RULES

if TYPE_CHECKING:
    from ksearch.tasks.base import Task  # imported lazily at run time (``_task``) to keep this module light


HARNESS_BASELINE_RULES = frozenset({*reference_ops.RULE_NAMES, "unlisted_import"})
"""The rules a harness's own baseline is not held to (``EvalRequest.harness_baseline``): it is the reference, or the
library a user compares against (FlashInfer's production kernels, ``ksearch.tasks.flashinfer.production``), so it
may call the reference's ops and import that library. Never applied to a candidate."""


def check_source(code: str, *, task_name: str | None = None, allow: frozenset[str] = frozenset()) -> Rejection | None:
    """The highest-priority broken rule as a Rejection, or None when the source looks honest (or does not parse:
    the syntax error is the worker's compile error to report). ``allow``: rules not to apply (for the harness's own
    baselines, ``HARNESS_BASELINE_RULES``)."""
    findings = scan(code, task_name=task_name, allow=allow)
    if not findings:
        return None
    first = findings[0]
    others = sorted({f.rule for f in findings} - {first.rule})
    more = f"; also broke: {', '.join(others)}" if others else ""
    return Rejection(rule=first.rule, evidence=(first.evidence() + more)[:1000])


def scan(code: str, *, task_name: str | None = None, allow: frozenset[str] = frozenset()) -> list[Finding]:
    """Every finding, ordered by rule priority then line. Empty for unparsable code."""
    try:
        tree = pyparse.parse(code)
    except (SyntaxError, ValueError):
        return []
    task = _task(task_name)
    support = frozenset(task.support_modules()) if task is not None else frozenset()
    scanner = Scanner(
        code,
        tree,
        forbidden=_forbidden_calls(task_name),
        entry_point=_entry_point(task_name),
        data_parameters=tuple(task.data_parameters) if task is not None else (),
        support_modules=support,
    )
    findings = list(dict.fromkeys([*scanner.run(), *reference_ops.findings(code, tree, task, allow=allow)]))
    order = list(RULES)
    return sorted((f for f in findings if f.rule not in allow), key=lambda f: (order.index(f.rule), f.line))


def _task(task_name: str | None) -> Task | None:
    if not task_name:
        return None
    try:
        from ksearch.tasks.registry import resolve_task

        return resolve_task(task_name)
    except Exception:  # noqa: BLE001 - an unknown task only loses its task-specific rules here
        return None


def _forbidden_calls(task_name: str | None) -> tuple[str, ...]:
    task = _task(task_name)
    declared = tuple(task.forbidden_calls) if task is not None else ()
    return TASK_FORBIDDEN_CALLS.get(task_name or "", ()) + declared


def _entry_point(task_name: str | None) -> str | None:
    task = _task(task_name)
    return task.entry_point if task is not None else None


__all__ = [
    "ALLOWED_TORCH_CALLS",
    "HARNESS_BASELINE_RULES",
    "RULES",
    "TASK_FORBIDDEN_CALLS",
    "Finding",
    "check_source",
    "scan",
]
