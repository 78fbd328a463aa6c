"""Best known competing kernels (``--compete FILE``): read when the run is created and kept in its config, so the
planner sees, per timed shape, how far the run's best is from them (issue 57).

A file is either a kernel module (any file that is not ``.json`` or ``.toml``), stored as a candidate and evaluated
on the run's device like any other (the same harness and timing method: times that compare like with like), or
per-shape times as the user measured them elsewhere::

    {"name": "K-Search best", "where": "H100, GPU MODE eval.py benchmark mode", "times_ms": {"b0": 0.29, "b1": 0.95}}

(a list of such objects, or the same keys in TOML, ``[[competitor]]`` tables for several). A shape is named by its
full benchmark config name or by its unique prefix before the first ``_`` (``b0``).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from ksearch.agent.config import Competitor, RunConfig
from ksearch.agent.context import SearchContext
from ksearch.contracts.candidate import Candidate
from ksearch.errors import UserError

TIME_FILES = (".json", ".toml")


def shape_name(key: str, names: list[str], source: str) -> str:
    """The benchmark config ``key`` names: itself, or the one config whose name starts with ``key_``."""
    if key in names:
        return key
    matches = [n for n in names if n.split("_")[0] == key]
    if len(matches) != 1:
        raise UserError(
            f"{source}: no timed shape of this task is called {key!r}",
            hint=f"use one of {', '.join(names)} (or its prefix before the first '_')",
        )
    return matches[0]


def _entries(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from exc
    if isinstance(data, dict) and "competitor" in data:
        data = data["competitor"]
    entries = data if isinstance(data, list) else [data]
    if not entries or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{path}: expected an object with name and times_ms (or a list of them)")
    return entries


def times_competitors(path: Path, names: list[str]) -> list[Competitor]:
    """The competitors a times file describes, each validated against the task's timed shapes."""
    out = []
    for entry in _entries(path):
        times = entry.get("times_ms")
        if not isinstance(times, dict) or not times:
            raise UserError(f"{path}: each competitor needs times_ms, a table of shape -> ms")
        resolved: dict[str, float] = {}
        for key, value in times.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise UserError(f"{path}: the time of {key!r} must be a positive number of ms, got {value!r}")
            resolved[shape_name(str(key), names, str(path))] = float(value)
        out.append(
            Competitor(
                name=str(entry.get("name") or path.stem),
                source=str(path),
                times_ms=resolved,
                where=str(entry.get("where") or "as given in the file"),
            )
        )
    return out


def kernel_competitor(ctx: SearchContext, path: Path) -> Competitor:
    """A competing kernel, evaluated on the run's device (cached per evaluation key, like every candidate)."""
    code = path.read_text(encoding="utf-8")
    config = ctx.config
    candidate = Candidate(task=config.task, language=config.language, code=code, entry_point=ctx.task.entry_point)
    candidate_id = ctx.store.ensure_candidate(candidate)
    found = ctx.store.find_evaluation(candidate_id, ctx.eval_key)
    if found is None:
        evaluation = ctx.evaluate_candidate(ctx.store.get_candidate(candidate_id))
        ctx.store.record_evaluation(candidate_id, ctx.eval_key, evaluation)
    else:
        evaluation = found[1]
    if not evaluation.passed:
        raise UserError(
            f"the competing kernel {path} does not pass: {evaluation.summary()}",
            hint=f"check it with `ksearch eval {config.task} {path}`",
        )
    return Competitor(
        name=path.stem,
        source=str(path),
        candidate_id=candidate_id,
        times_ms={t.config: t.headline_ms for t in evaluation.timings},
        where=f"evaluated here: {evaluation.summary()}",
    )


def resolve_competitors(ctx: SearchContext) -> RunConfig:
    """The run's config with ``competitors`` filled from ``compete`` (a config that has them keeps them)."""
    config = ctx.config
    if not config.compete or config.competitors:
        return config
    names = [c.name for c in ctx.task.benchmark_configs("cuda")]  # a times file is measured on a GPU
    competitors: list[Competitor] = []
    for given in config.compete:
        path = Path(given)
        if not path.is_file():
            raise UserError(f"--compete {given}: no such file")
        if path.suffix in TIME_FILES:
            competitors.extend(times_competitors(path, names))
        else:
            competitors.append(kernel_competitor(ctx, path))
    resolved = [str(Path(c).resolve()) for c in config.compete]
    return config.model_copy(update={"compete": resolved, "competitors": competitors})
