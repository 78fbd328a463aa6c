"""The ``skills`` flows: list, show, export and import the workspace's skill library, and learn skills from an expert
kernel (KLineage's backward walk on our evaluator). Library calls the CLI and the MCP server share; nothing prints.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import ValidationError

from ksearch.agent.config import RunConfig
from ksearch.agent.promotion import paired_comparison
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Comparison, Evaluation
from ksearch.errors import BudgetExceededError, ModelReplyError, UserError
from ksearch.flows.placement import resolve_device
from ksearch.flows.workspace import open_store
from ksearch.llm.client import LLMClient
from ksearch.llm.interactive import INTERACTIVE_MODEL
from ksearch.llm.models import build_model
from ksearch.llm.recorder import StoreRecorder
from ksearch.llm.replay import ReplayChatModel, ReplayEntry
from ksearch.skills.evidence import Evidence, EvidenceKind, SkillStatus, SkillView
from ksearch.skills.exchange import SkillExport, SkillRecord
from ksearch.skills.library import library_views, load_evidence, load_skill, record_evidence, save_skill, skill_view
from ksearch.skills.lifting import LiftInput, lift_skill, measurement_text
from ksearch.skills.records import SkillContext, SkillSource, arch_from_capability, task_family
from ksearch.skills.snapshot import in_scope
from ksearch.skills.walk import MAX_REJECTIONS, MAX_STEPS, WalkResult, WalkServices, WalkStep, backward_walk
from ksearch.store import Store
from ksearch.tasks.registry import prepare_task
from ksearch.tools.evaluator import EvalRequest
from ksearch.tools.executors.local import LocalExecutor
from ksearch.tools.fingerprint import probe_device

# --------------------------------------------------------------------------------------------------------------------
# list / show / export / import


def list_skills(
    workspace: Path | None = None,
    *,
    task: str | None = None,
    language: str | None = None,
    arch: str | None = None,
    status: str | None = None,
) -> list[SkillView]:
    """The library with status and estimates derived now; optionally only the skills in scope for a task family,
    language and arch (each filter alone matches as the run's hard filter would), and of one status."""
    store = open_store(workspace, read_only=True)
    try:
        views = library_views(store)
    finally:
        store.close()
    if status is not None:
        views = [v for v in views if v.status.value == status]
    if task is not None or language is not None or arch is not None:
        views = [v for v in views if _partial_scope(v, task, language, arch)]
    return views


def _partial_scope(view: SkillView, task: str | None, language: str | None, arch: str | None) -> bool:
    scope = view.skill.scope
    probe = SkillContext(
        family=task_family(task) if task else scope.families[0],
        language=language or scope.languages[0],
        arch=arch or scope.archs[0],
    )
    return in_scope(view, probe)


def show_skill(skill_id: str, workspace: Path | None = None) -> tuple[SkillView, list[Evidence]]:
    """One skill (a unique id prefix is enough) with its derived view and its whole evidence log."""
    store = open_store(workspace, read_only=True)
    try:
        view = skill_view(store, skill_id)
        return view, load_evidence(store, view.skill_id)
    finally:
        store.close()


def export_skills(path: Path, workspace: Path | None = None, *, skill_ids: list[str] | None = None) -> int:
    """Write the library (or the given skills) with their evidence logs as a ``ksearch-skills`` JSON file."""
    store = open_store(workspace, read_only=True)
    try:
        ids = (
            [load_skill(store, s).skill_id for s in skill_ids]
            if skill_ids
            else [v.skill_id for v in library_views(store)]
        )
        records = [SkillRecord(skill=load_skill(store, sid), evidence=load_evidence(store, sid)) for sid in ids]
    finally:
        store.close()
    payload = SkillExport(skills=records)
    try:
        Path(path).write_text(payload.model_dump_json(indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc}") from exc
    return len(records)


@dataclass
class ImportReport:
    new_skills: list[str] = field(default_factory=list)
    known_skills: list[str] = field(default_factory=list)
    evidence_added: int = 0


def import_skills(path: Path, workspace: Path | None = None) -> ImportReport:
    """Read a ``ksearch-skills`` file into the library. Ids are recomputed from each skill's content (an edited skill
    gets a new id); evidence is marked imported and deduplicated, so importing a file twice changes nothing."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path} is not a ksearch-skills file: it is not UTF-8 text ({exc.reason} at byte {exc.start})",
            hint="write one with `ksearch skills export FILE`",
        ) from exc
    try:
        payload = SkillExport.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in exc.errors()[:5])
        raise UserError(
            f"{path} is not a ksearch-skills file: {problems}",
            hint="write one with `ksearch skills export FILE`; hand-written skills need the same fields",
        ) from exc
    report = ImportReport()
    store = open_store(workspace)
    try:
        for record in payload.skills:
            skill = record.skill
            (report.new_skills if save_skill(store, skill) else report.known_skills).append(skill.skill_id)
            for ev in record.evidence:
                imported = ev.model_copy(update={"imported": True})
                report.evidence_added += int(record_evidence(store, skill.skill_id, imported))
    finally:
        store.close()
    return report


# --------------------------------------------------------------------------------------------------------------------
# learn: the backward walk over an expert kernel


@dataclass
class LearnReport:
    session: str
    task: str
    context: SkillContext
    expert_candidate_id: str
    expert: Evaluation
    walk: WalkResult
    skills: list[SkillView]
    lift_errors: list[str] = field(default_factory=list)


LearnEvent = Callable[[str, dict[str, Any]], None]


def new_session_id(file: Path) -> str:
    stem = "".join(c if c.isalnum() else "-" for c in Path(file).stem)[:24]
    return f"learn-{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def learn_from_expert(
    file: Path,
    task: str,
    *,
    model: str,
    workspace: Path | None = None,
    device: str = "auto",
    language: str = "triton",
    base_url: str | None = None,
    session: str | None = None,
    max_steps: int = MAX_STEPS,
    max_rejections: int = MAX_REJECTIONS,
    compare_rounds: int = 5,
    on_event: LearnEvent | None = None,
) -> LearnReport:
    """Evaluate the expert (it must pass), walk it backward with the ``skill_simplifier`` role, and lift every
    accepted step, reversed, into a candidate skill (role ``skill_lifter``) with the step as its origin evidence.

    Every LLM call is recorded under ``session`` (in ``llm_calls``) and every kernel is a stored candidate with a
    cached evaluation, so re-running with the same ``session`` after a crash repeats nothing that was paid for.
    """
    emit = on_event or (lambda _event, _data: None)
    if max_steps < 1 or max_rejections < 1:
        raise UserError("--max-steps and --max-rejections must be at least 1")
    if model == INTERACTIVE_MODEL:  # the walk is no graph run: it has no checkpoint to pause at and resume from
        raise UserError(
            "skills learn cannot take --model interactive: the backward walk cannot pause for your replies",
            hint="use a provider model (openai:..., --base-url for a local server) or replay:FILE of scripted "
            'replies (one {"reply": ..., "call_key": ...} per line)',
        )
    try:
        expert_code = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the expert kernel {file}: {exc}") from exc
    device = resolve_device(device)
    resolved = prepare_task(task, device=device)
    if language not in resolved.languages:
        raise UserError(f"task {resolved.name} supports {', '.join(resolved.languages)}, not {language}")
    info = probe_device(device)
    if device != "cpu" and not info.is_gpu:
        raise UserError(f"--device {device} asked for a GPU, but none is visible to torch", hint="use --device cpu")
    context = SkillContext(
        family=task_family(resolved.name), language=language, arch=arch_from_capability(info.capability)
    )
    session = session or new_session_id(file)
    config = RunConfig(
        run_id=session, task=resolved.name, model=model, base_url=base_url, device=device, language=language
    )
    store = open_store(workspace)
    executor = LocalExecutor()
    try:
        llm = LLMClient(learn_model(config, store), StoreRecorder(store, session), model_name=model)
        kernels = _Kernels(
            store,
            executor,
            resolved.name,
            resolved.entry_point,
            language,
            device,
            info.eval_key(resolved.name),
            compare_rounds,
        )
        emit("expert", {"session": session, "context": context.model_dump()})
        expert_id, expert = kernels.evaluate(expert_code)
        if not expert.passed:
            raise UserError(
                f"the expert kernel {file} does not pass the evaluator: {expert.summary()}",
                hint=f"check it with `ksearch eval {task} {file}`; the walk starts only from a correct kernel",
            )
        emit("expert_passed", {"summary": expert.summary(), "candidate_id": expert_id})
        services = WalkServices(
            llm=llm,
            evaluate=kernels.evaluate,
            compare=kernels.compare,
            task_spec=resolved.spec(language),
            language=language,
            device_description=info.describe(),
        )
        walk = backward_walk(
            services,
            expert_code,
            expert_id,
            max_steps=max_steps,
            max_rejections=max_rejections,
            on_step=lambda step: emit("step", step.model_dump()),
        )
        emit("walk_done", {"termination": walk.termination, "reason": walk.reason})
        views, errors = _lift_walk(store, llm, walk, context, session, resolved.name, resolved.spec(language), emit)
    finally:
        executor.close()
        store.close()
    return LearnReport(
        session=session,
        task=resolved.name,
        context=context,
        expert_candidate_id=expert_id,
        expert=expert,
        walk=walk,
        skills=views,
        lift_errors=errors,
    )


def learn_model(config: RunConfig, store: Store) -> BaseChatModel:
    """The run's model factory, plus ``replay:SESSION``: the recorded replies of an earlier learn session (for
    example, a session walked on the CPU replayed on a GPU, where the steps are timed)."""
    source = config.model.removeprefix("replay:")
    if config.model.startswith("replay:") and not Path(source).exists():
        calls = [c for c in store.list_llm_calls(source) if c["reply"] is not None]
        if calls:
            entries = [
                ReplayEntry(
                    reply=c["reply"],
                    call_key=c["call_key"],
                    input_tokens=c["input_tokens"] or 0,
                    output_tokens=c["output_tokens"] or 0,
                )
                for c in calls
            ]
            return ReplayChatModel(entries=entries, model_name=config.model)
    return build_model(config, store)  # a replay:FILE that does not exist fails here, with the factory's message


class _Kernels:
    """Code -> stored candidate -> cached evaluation, and cached paired comparisons, for one learning session."""

    def __init__(
        self,
        store: Store,
        executor: LocalExecutor,
        task: str,
        entry_point: str,
        language: str,
        device: str,
        eval_key: str,
        rounds: int,
    ) -> None:
        self.store, self.executor, self.task, self.entry_point, self.language = (
            store,
            executor,
            task,
            entry_point,
            language,
        )
        self.device, self.eval_key, self.rounds = device, eval_key, rounds

    def request(self, candidate: Candidate) -> EvalRequest:
        return EvalRequest(candidate=candidate, task=self.task, device=self.device, timing=self.device != "cpu")

    def evaluate(self, code: str) -> tuple[str, Evaluation]:
        candidate = Candidate(task=self.task, language=self.language, code=code, entry_point=self.entry_point)
        cid = self.store.ensure_candidate(candidate)
        found = self.store.find_evaluation(cid, self.eval_key)
        if found is not None:
            return cid, found[1]
        evaluation = self.executor.evaluate(self.request(candidate))
        self.store.record_evaluation(cid, self.eval_key, evaluation)
        return cid, evaluation

    def compare(self, incumbent_id: str, challenger_id: str) -> dict[str, Any] | None:
        if self.device == "cpu":
            return None
        return paired_comparison(self.store, incumbent_id, challenger_id, self.eval_key, self._measure)

    def _measure(self, incumbent_id: str, challenger_id: str) -> Comparison:
        return self.executor.compare(
            self.request(self.store.get_candidate(incumbent_id)),
            self.request(self.store.get_candidate(challenger_id)),
            rounds=self.rounds,
        )


def _lift_walk(
    store: Store,
    llm: LLMClient,
    walk: WalkResult,
    context: SkillContext,
    session: str,
    task: str,
    task_spec: str,
    emit: LearnEvent,
) -> tuple[list[SkillView], list[str]]:
    """Reverse the walk (naive -> expert) and lift each accepted step; failures of the same category become the
    skill's failure evidence."""
    failures: dict[str, list[str]] = {}
    for step in walk.steps:
        if not step.accepted:
            failures.setdefault(step.category, []).append(f"{step.removed}: rejected: {step.reason}")
    views, errors = [], []
    for step in reversed(walk.accepted):
        assert step.after_candidate_id is not None
        item = LiftInput(
            origin=f"step {step.index} of a backward walk over an expert kernel, reversed: the expert had this "
            "optimisation, and removing it kept the kernel correct",
            context=context,
            task_spec=task_spec,
            change=f"Add back: {step.removed} (category {step.category}, at {step.locus}). "
            f"The removal was: {step.backward_edit or step.removed}",
            before_code=store.get_candidate(step.after_candidate_id).code,
            after_code=store.get_candidate(step.before_candidate_id).code,
            # the walk compared (incumbent = without, challenger = with): its speedup is the optimisation's effect
            measurement=measurement_text(step.comparison, what="with the optimisation versus without"),
            failures=failures.get(step.category, []),
        )
        try:
            skill = lift_skill(llm, f"lift:{step.index}", item, source=SkillSource.EXPERT)
        except (ModelReplyError, BudgetExceededError) as exc:
            errors.append(f"step {step.index} ({step.category}): {exc}")
            emit("lift_failed", {"index": step.index, "error": str(exc)})
            continue
        save_skill(store, skill)
        record_evidence(store, skill.skill_id, _origin(step, context, session, task))
        view = skill_view(store, skill.skill_id)
        views.append(view)
        emit("skill", {"index": step.index, "skill_id": skill.skill_id, "intent": skill.intent})
    return views, errors


def _origin(step: WalkStep, context: SkillContext, session: str, task: str) -> Evidence:
    timed = step.speedup is not None
    note = f"expert walk: removing '{step.removed}' was accepted: {step.reason}"
    return Evidence(
        kind=EvidenceKind.ORIGIN,
        run_id=session,
        cycle_id=f"step{step.index}",
        task=task,
        family=context.family,
        language=context.language,
        arch=context.arch,
        base_candidate_id=step.after_candidate_id,
        candidate_id=step.before_candidate_id,
        verdict="passed",
        timed=timed,
        speedup=step.speedup,
        ci_low=step.ci_low,
        ci_high=step.ci_high,
        note=note[:600],
    )


def report_json(report: LearnReport) -> str:
    return json.dumps(
        {
            "session": report.session,
            "task": report.task,
            "context": report.context.model_dump(),
            "expert_candidate_id": report.expert_candidate_id,
            "expert": report.expert.summary(),
            "walk": report.walk.model_dump(mode="json"),
            "skills": [v.model_dump(mode="json") for v in report.skills],
            "lift_errors": report.lift_errors,
        },
        indent=2,
    )


STATUSES = [s.value for s in SkillStatus]
