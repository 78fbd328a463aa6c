"""Mutation bench for the modules that decide results (issue 34): how many plausible one-line bugs the tests catch.

Usage (from the repository root of a clone, with the test extra installed):

    python bench/mutation.py                       # every target: kill rate per module, then the survivors
    python bench/mutation.py --module promotion    # only targets whose path contains 'promotion'
    python bench/mutation.py --list                # the mutants, without running anything
    python bench/mutation.py --spawn               # each mutant in a fresh `python -m pytest` (slower, no fork)
    python bench/mutation.py --json out.json       # also write every mutant's outcome as JSON

What it does: for each target module (``TARGETS``) it parses the source, applies one operator of a curated list
(``OPERATORS``) at one place at a time, writes the mutant into a scratch copy of the repository and runs the tests
that cover the module (the mapping is ``TARGETS``) with ``pytest -x -q -n 0 -p no:cacheprovider``. A mutant is
*killed* when a test fails (or the tests stop collecting, or run past the per-mutant timeout), *survives* when they
all pass. The kill rate of a module is killed / (mutants - known equivalents); ``EQUIVALENT`` lists the mutants that
cannot change behaviour, each with its reason, and the report warns when one of them is killed or no longer exists.

Each module's tests first run unmutated (the baseline); its mutants are run only when that passes, with a timeout of
a few times the baseline's duration. By default a mutant's tests run in a child forked from this process after it
imported the third-party packages the tests use (torch, pydantic, LangGraph...; never ``ksearch`` or ``tests``, which
the child imports from the scratch copy), so a mutant costs its tests, not the 5-15 s of imports; ``--spawn`` runs
the literal command in a new interpreter instead. ``--jobs`` runs that many mutants at once, each in its own copy.

Why not mutmut or cosmic-ray: mutmut 3 starts by running the whole suite (about 700 tests, some of which start GPU
workers) to map tests to functions, mutates every string and number of every function it finds, and rewrites each
function into a trampoline, which changes the module text that ``Task.definition_digest`` hashes; cosmic-ray needs
a session database and a config per module and starts a fresh interpreter for each of thousands of mutants. Neither
lets us say which functions decide results and which tests cover them, which is what makes this run in minutes.

Not mutated: strings and f-strings (messages), annotations, decorators, docstrings, ``assert``s, logging calls, and
module-level data tables (only ``NAME = <number>`` constants at module and class level are).

A benchmark, not part of CI: no test runs it (tests/test_bench_mutation.py checks its operators on small sources).
"""

from __future__ import annotations

import argparse
import ast
import collections
import copy
import gc
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTEST_ARGS = ("-x", "-q", "-n", "0", "-p", "no:cacheprovider")


@dataclass(frozen=True)
class Target:
    """A module whose decisions are mutated, and the tests that must catch a wrong one."""

    path: str
    """The module's file, relative to the repository root."""
    tests: tuple[str, ...]
    """Test files or pytest node ids that cover it."""
    functions: tuple[str, ...] = ()
    """Qualified names to mutate: a function (``Task.check``), a class (all its methods and constants) or a constant
    (``MIN_LATENCY_MS``); empty: the whole module."""


HONEST_STATIC = "tests/tools/test_honest_corpus.py::test_every_static_rule_lets_it_through"
"""The honest corpus through every static rule: a rule made too eager rejects one of them."""
PROMPT_DEFECTS = "tests/agent/test_prompt_defects.py"
"""Both prompts rendered from examples/trimul-record's kernels and times, one test per defect of issue 57."""

TARGETS: tuple[Target, ...] = (
    Target(
        "ksearch/agent/promotion.py",
        ("tests/agent/test_promotion_rules.py", "tests/agent/test_promotion.py", "tests/agent/test_evidence_view.py"),
    ),  # the last: promotion_line
    Target("ksearch/nodes/prune.py", ("tests/agent/test_prune.py", "tests/agent/test_promotion.py")),
    Target("ksearch/agent/selection.py", ("tests/agent/test_selection.py", "tests/agent/test_steering.py")),
    Target("ksearch/agent/cycle_logic.py", ("tests/agent/test_cycle_logic.py",)),
    Target("ksearch/agent/edit_ops.py", ("tests/agent/test_edits.py",)),
    Target("ksearch/agent/edits.py", ("tests/agent/test_edits.py",)),
    Target(
        "ksearch/agent/world_model.py",
        ("tests/agent/test_world_model.py", "tests/agent/test_edits.py", "tests/agent/test_selection.py"),
    ),
    Target("ksearch/llm/usage.py", ("tests/llm/test_budget.py",), functions=("RoleUsage", "Usage", "Budget")),
    Target(
        "ksearch/llm/client.py",
        ("tests/llm/test_budget.py",),
        functions=("LLMClient.budget_exceeded", "LLMClient._check_budget"),
    ),
    Target("ksearch/tools/timing/stats.py", ("tests/tools/test_stats.py", "tests/tools/test_timing.py")),
    Target("ksearch/tools/timing/roofline.py", ("tests/tools/test_stats.py", "tests/tools/test_timing.py")),
    Target(
        "ksearch/tools/evaluator/parent/ledger.py",
        (
            "tests/tools/test_ledger.py",
            "tests/tools/test_ledger_edges.py",
            "tests/tools/test_ledger_schedule.py",
            "tests/tools/test_ledger_schedule_edges.py",
        ),
    ),
    Target(
        "ksearch/tools/evaluator/parent/ledger_rules.py",
        (
            "tests/tools/test_ledger.py",
            "tests/tools/test_ledger_edges.py",
            "tests/tools/test_ledger_schedule.py",
            "tests/tools/test_ledger_schedule_edges.py",
        ),
    ),
    Target(
        "ksearch/tools/evaluator/parent/ledger_loops.py",
        (
            "tests/tools/test_ledger.py",
            "tests/tools/test_ledger_edges.py",
            "tests/tools/test_ledger_schedule.py",
            "tests/tools/test_ledger_schedule_edges.py",
        ),
    ),
    Target(
        "ksearch/tasks/base.py",
        ("tests/tasks/test_task_base.py", "tests/tasks/test_tolerance_fast_path.py"),
        functions=(
            "MIN_LATENCY_MS",
            "Task.activation_inputs",
            "Task.definition_digest",
            "Task.output_strides",
            "Task.check",
            "Task.form_mismatch",
            "Task.score",
            "tolerance_mismatch",
            "_count_outside",
            "_chunks",
            "_contiguous_strides",
        ),
    ),
    Target(
        "ksearch/tools/fingerprint.py",
        ("tests/tools/test_fingerprint.py",),
        functions=("DeviceInfo", "task_signature"),
    ),
    Target(
        "ksearch/store/store.py",
        ("tests/tools/test_store_lookups.py", "tests/tools/test_store.py"),
        functions=(
            "Store.evaluation_id",
            "Store.find_evaluation",
            "Store.record_evaluation",
            "Store.get_evaluation_key",
            "ensure_comparison",
            "find_comparison",
        ),
    ),
    Target(
        "ksearch/tools/integrity/caching.py",
        ("tests/tools/test_integrity.py", "tests/tools/test_integrity_edges.py", HONEST_STATIC),
        functions=(
            "CachingRules._memoised_function",
            "CachingRules._keyed_caches",
            "CachingRules._replayed_outputs",
            "CachingRules._container_key",
            "CachingRules._fingerprint",
            "CachingRules._is_input",
        ),
    ),
    Target(
        "ksearch/tools/integrity/reach.py",
        ("tests/tools/test_integrity_reach.py", "tests/tools/test_integrity_edges.py", HONEST_STATIC),
        functions=(
            "ReachRules._import_path",
            "ReachRules._steps",
            "ReachRules._reach_call",
            "ReachRules._named_attribute",
            "ReachRules._starts_with_letter",
            "_plain_chain",
        ),
    ),
    Target(
        "ksearch/tools/integrity/reach_lists.py",
        ("tests/tools/test_integrity_reach.py", "tests/tools/test_integrity_edges.py", HONEST_STATIC),
        functions=("private_status", "candidate_may_import", "_leads_to"),
    ),
    Target(
        "ksearch/tools/timing/primitives.py",
        (
            "tests/tools/test_fresh_plan.py",
            "tests/tools/test_audit_rate.py::test_a_plans_audits_follow_its_rate_and_never_fall_below_the_minimum",
        ),
        functions=("FreshPlan", "rerandomised"),
    ),
    Target(
        "ksearch/tools/evaluator/parent/gpu_sharing.py",
        tuple(
            f"tests/tools/test_gpu_sharing.py::{name}"
            for name in (
                "test_parse_the_rows_nvidia_smi_prints",
                "test_judge_names_the_busy_gpu_of_the_anchor_and_the_processes_not_ours",
                "test_judge_says_nothing_when_it_cannot_tell_or_the_gpu_is_idle",
                "test_rows_that_are_not_data_are_skipped",
                "test_a_gpu_at_exactly_the_threshold_is_busy",
                "test_the_threshold_is_the_one_the_readme_states",
                "test_the_other_processes_are_named_largest_first",
                "test_process_tree_holds_our_children_and_not_others",
            )
        ),  # the evaluations in that file take 30 s: the pure parts are pinned by these
        functions=("BUSY_PERCENT", "parse_apps", "parse_utilisation", "process_tree", "gpu_of", "judge"),
    ),
    Target(
        "ksearch/tools/integrity/streams.py",
        ("tests/tools/test_integrity.py", "tests/tools/test_integrity_edges.py", HONEST_STATIC),
    ),
    Target(
        "ksearch/tools/integrity/gateways.py",
        ("tests/tools/test_integrity_gateways.py", "tests/tools/test_integrity_reach.py", HONEST_STATIC),
        functions=("gateway_kind", "landing", "walk_gateways", "_member", "_module", "_submodule_exists", "_is_loader"),
    ),
    Target(
        "ksearch/tools/integrity/processes.py",
        (
            "tests/tools/test_integrity_rules.py",
            "tests/tools/test_integrity.py",
            "tests/tools/test_integrity_edges.py",
            "tests/tools/test_integrity_reach.py",
            HONEST_STATIC,
        ),
    ),
    Target(
        "ksearch/tools/integrity/library.py",
        (
            "tests/tools/test_integrity_rules.py",
            "tests/tools/test_integrity.py",
            "tests/tools/test_integrity_edges.py",
            HONEST_STATIC,
        ),
    ),
    Target(
        "ksearch/tools/integrity/base.py",
        ("tests/tools/test_integrity_rules.py", "tests/tools/test_integrity.py"),
        functions=("is_main_test", "binds", "binds_otherwise"),
    ),
    Target(
        "ksearch/tools/integrity/reference_ops.py",
        ("tests/tasks/test_kernelbench_checks.py", "tests/tools/test_integrity.py", HONEST_STATIC),
    ),
    Target(
        "ksearch/tools/integrity/reference_op_names.py",
        ("tests/tasks/test_kernelbench_checks.py", "tests/tools/test_integrity.py", HONEST_STATIC),
    ),
    Target(
        "ksearch/tools/integrity/writes.py",
        ("tests/tools/test_integrity.py", "tests/tools/test_integrity_edges.py", HONEST_STATIC),
        functions=("WriteRules._open", "WriteRules._env_use_allowed", "WriteRules._patched", "_settable"),
    ),
    # the prompt-building modules (issue 57): what the planner and the coder read
    Target(
        "ksearch/agent/evidence_text.py",
        (
            "tests/agent/test_evidence_text.py",
            "tests/agent/test_evidence_numbers.py",
            "tests/agent/test_evidence_view.py",
            "tests/agent/test_counters_text.py",
            PROMPT_DEFECTS,
        ),
    ),
    Target("ksearch/agent/code_view.py", ("tests/agent/test_code_view.py", "tests/agent/test_coder_context.py")),
    Target("ksearch/agent/planner_evidence.py", ("tests/agent/test_evidence_view.py", PROMPT_DEFECTS)),
    Target("ksearch/agent/sibling_view.py", ("tests/agent/test_sibling_view.py", PROMPT_DEFECTS)),
    Target("ksearch/agent/compete_view.py", ("tests/agent/test_compete_view.py", PROMPT_DEFECTS)),
    Target(
        "ksearch/agent/prompting.py",
        ("tests/agent/test_prompts.py", "tests/agent/test_sweep_action.py", PROMPT_DEFECTS),
        functions=("node_line", "_versus_parent", "frontier_view", "action_view", "sweep_instructions"),
    ),
    Target("ksearch/tasks/trimul/cost_text.py", (PROMPT_DEFECTS,)),
    Target(
        "ksearch/nodes/write_kernel.py",
        ("tests/agent/test_coder_feedback.py", "tests/agent/test_coder_context.py", PROMPT_DEFECTS),
        functions=("starting_code", "best_code", "feedback", "first_feedback", "comparison", "_shown_id", "_regressed"),
    ),
    Target(
        "ksearch/nodes/plan.py",
        ("tests/agent/test_evidence_view.py", PROMPT_DEFECTS),
        functions=("competitors_section", "selection_rules", "best_evidence"),
    ),
)

EQUIVALENT: dict[str, str] = {
    "ksearch/tools/integrity/gateways.py::_submodule_exists: False -> True": (
        "find_spec raises for a parent that is not a package; importing the name then fails too and the chain ends "
        "with None, as it does on _MISSING"
    ),
    "ksearch/tools/integrity/gateways.py::_submodule_exists: name in sys.modules -> name not in sys.modules": (
        "a name in sys.modules is found by find_spec too, and one that is not is imported, or fails to be, as "
        "find_spec would have said"
    ),
    "ksearch/tools/integrity/streams.py::StreamRules._graph_reference: isinstance(parent, ast.Attribute) and "
    "parent.value is node -> isinstance(parent, ast.Attribute)": "an Attribute's only expression child is its value",
    "ksearch/tools/integrity/streams.py::StreamRules._graph_reference: ...yncFunctionDef, ast.ClassDef)) and node in "
    "parent.decorator_list -> ...yncFunctionDef, ast.ClassDef))": (
        "a definition's other expression children are annotations, which returned before this line"
    ),
    "ksearch/tools/integrity/streams.py::StreamRules._graph_reference: ...tance(parent, ast.Assign) and parent.value "
    "is node and all((isinstance(t, ast.Name) f... -> ...tance(parent, ast.Assign) and all((isinstance(t, ast.Name) "
    "f...": (
        "a node under an Assign that is not its value is a target: a Name target returned before (not a Load), and "
        "any other target makes all() false"
    ),
    "ksearch/agent/evidence_text.py::Change.describe: self.speedup > 1 -> self.speedup >= 1": (
        "a speedup of exactly 1 is a difference of 0, always within noise, which returns before"
    ),
    "ksearch/agent/evidence_text.py::versus: speedup > 1 -> speedup >= 1": (
        "a speedup of exactly 1 is a difference of 0, always within noise, which is said before"
    ),
    (
        "ksearch/agent/evidence_text.py::aggregate_change: hypot(... _aggregate_error(new), _aggregate_error(old) ...) "
        "-> hypot(... _aggregate_error(old), _aggregate_error(new) ...)"
    ): "hypot is symmetric",
    (
        "ksearch/agent/evidence_text.py::_weights_note: max(values) - min(values) < 0.005 -> "
        "max(values) - min(values) <= 0.005"
    ): "only weights exactly 0.005 apart differ: either reading is true to the figures shown",
    "ksearch/nodes/prune.py::prune: change.speedup < 1.0 -> change.speedup <= 1.0": (
        "a speedup of exactly 1 is a difference of 0, always within noise, so never a regression either way"
    ),
    "ksearch/agent/planner_evidence.py::cycle_block: parent is not None and parent.latency_ms -> parent.latency_ms": (
        "a cycle with a base always has its parent's evaluation: the base is the parent's solution"
    ),
    (
        "ksearch/agent/evidence_text.py::within_noise: difference < max(NOISE_FLOOR, NOISE_SIGMAS * "
        "combined) -> difference <= max(NOISE_FLOOR, NOISE_SIGMAS * combined)"
    ): (
        "a difference of exactly the band (a binary float equal to 0.02 or to two standard errors) reads "
        "either way: both are honest"
    ),
    (
        "ksearch/agent/evidence_text.py::aggregate_change: difference < max(NOISE_FLOOR, NOISE_SIGMAS * "
        "combined) -> difference <= max(NOISE_FLOOR, NOISE_SIGMAS * combined)"
    ): ("as within_noise's: only a difference of exactly the band differs"),
    (
        "ksearch/agent/evidence_text.py::parent_change: abs(speedup - 1.0) < NOISE_FLOOR -> abs(speedup - "
        "1.0) <= NOISE_FLOOR"
    ): ("as within_noise's: only a ratio of exactly 1 +- 0.02 differs"),
    (
        "ksearch/agent/evidence_text.py::within_noise: hypot(... _relative_error(new), _relative_error(old) "
        "...) -> hypot(... _relative_error(old), _relative_error(new) ...)"
    ): ("hypot is symmetric"),
    ("ksearch/agent/evidence_text.py::ranked: 0.0 -> 1.0"): (
        "the default is taken only without weights, where every shape takes it and the time alone orders them"
    ),
    ("ksearch/agent/evidence_text.py::_weights_note: 0.0 -> 1.0"): (
        "every timed shape has a weight (they were measured from the same timings)"
    ),
    ("ksearch/agent/evidence_text.py::ranked: 3 -> 4"): (
        "weights measured by one finite difference agree far below 1e-4 for equally weighted shapes"
    ),
    "ksearch/agent/prompting.py::frontier_view: 0 -> 1": (
        "the frontier has rows here, so the tree has a family and the default is never taken"
    ),
    "ksearch/agent/code_view.py::change_view: len(diff) >= len(after) -> len(diff) > len(after)": (
        "a diff exactly as long as the code: shown either way, the prompt carries the same change at the same length"
    ),
    "ksearch/agent/compete_view.py::_gap: abs(ratio - 1.0) < 0.005 -> abs(ratio - 1.0) <= 0.005": (
        "only a ratio of exactly 1.005 in binary floating point differs, which prints as x1.00 or x1.01 either way"
    ),
    "ksearch/agent/compete_view.py::_gap: ratio < 1.0 -> ratio <= 1.0": (
        "a ratio of exactly 1.0 returned 'level' on the line before"
    ),
    "ksearch/tools/integrity/processes.py::ProcessRules._threading_misuse: isinstance(parent, ast.Attribute) and "
    "parent.value is node and (parent.attr in SAFE_THREADING) -> isinstance(parent, ast.Attribute) and parent.attr "
    "in SAFE_THREADING": "a Name under an Attribute is always its value (an Attribute's other field is a string)",
    "ksearch/tools/integrity/processes.py::ProcessRules._import: node.module or '' -> node.module": (
        "only a relative import has no module, and it returned before this line"
    ),
    "ksearch/tools/integrity/processes.py::ProcessRules._import: node.module or '' -> node.module and ''": (
        "only a relative import has no module, and it returned before this line; '' matches no import rule, nor does "
        "the module name the line adds beside its names' full ones (they extend it)"
    ),
    "ksearch/tools/integrity/processes.py::ProcessRules._import: node.module or '' -> ''": (
        "as above: the module's own name adds nothing to the full names of what it imports"
    ),
    "ksearch/tools/integrity/processes.py::ProcessRules._introspection_attribute: native and (not "
    "matches(self.resolve(node.value), NATIVE_LOADERS)) -> native": (
        "each deeper attribute of the chain reports the same finding (same line, snippet and loader), which scan() "
        "keeps once"
    ),
    "ksearch/tools/integrity/library.py::LibraryRules._forbidden_call: self.forbidden and (not "
    "name.startswith('triton.')) and (id(node) not in self.self_test) -> not name.startswith('triton.') and "
    "id(node) not in self.self_test": "with nothing forbidden, matches() finds no prefix",
    "ksearch/tools/integrity/library.py::LibraryRules._forbidden_call: self.forbidden and (not "
    "name.startswith('triton.')) and (id(node) not in self.self_test) -> self.forbidden and (not "
    "name.startswith('triton.'))": (
        "the scanner's walk never visits the self-test's nodes, so no call there reaches this rule"
    ),
    "ksearch/tools/integrity/library.py::LibraryRules._forbidden_call: 'triton.' -> 'triton'": (
        "a resolved name that starts with 'triton' but not 'triton.' is another module, which the allow-list of "
        "imports (unlisted_import) refuses whatever it calls"
    ),
    "ksearch/tools/integrity/library.py::LibraryRules._reference_class: node.bases and all((isinstance(s, ast.Pass) "
    "for s in body)) -> all((isinstance(s, ast.Pass) for s in body))": (
        "without bases there is no base name to match the reference's"
    ),
    "ksearch/tools/integrity/streams.py::StreamRules._bindings: isinstance(node, ast.AnnAssign) and node.value is "
    "not None -> isinstance(node, ast.AnnAssign)": (
        "an annotation without a value binds nothing readable either way: unmapped, its Name makes the bindings empty; "
        "mapped to None, _literal_values(None) and _bound_dict([..., None]) read nothing"
    ),
    "ksearch/tools/evaluator/parent/gpu_sharing.py::judge: uuid is None or not readings or any((uuid not in reading "
    "for reading in readings)) -> not readings or any((uuid not in reading for reading in readings))": (
        "a reading's keys are uuid strings, so with no uuid (None) every non-empty reading lacks it and the check "
        "after it returns None as well"
    ),
    "ksearch/tools/timing/primitives.py::FreshPlan.wants: position < self._first -> position <= self._first": (
        "the line before returns for position == self._first, so the two comparisons differ on no position that "
        "reaches them"
    ),
    "ksearch/tools/evaluator/parent/ledger_loops.py::_schedule_problem: _robust_schedule(... run, timed ...) -> "
    "_robust_schedule(... timed, run ...)": (
        "_robust_schedule returns at once unless run and timed are as long, and a robust run with no null window holds "
        "the same windows as its timed ones"
    ),
    "ksearch/tools/evaluator/parent/ledger_loops.py::_gpumode_schedule: zip(... seen, expected ...) -> "
    "zip(... expected, seen ...)": "the first position where two strings differ does not depend on which is read first",
    "ksearch/tools/timing/stats.py::UndisturbedSamples._last_kept: False -> True": (
        "add() sets it before should_stop reads it (should_stop returns before reading it below three repeats)"
    ),
    "ksearch/tools/timing/stats.py::UndisturbedSamples.should_stop: 0.0 -> 1.0": (
        "the inner rule's wall cap is infinite: any wall time given to it is never over it"
    ),
    "ksearch/tools/timing/stats.py::UndisturbedSamples.should_stop: 1 -> 2": (
        "the inner rule's repeat cap only has to exceed the kept repeats, which are at most runs: runs + 2 does too"
    ),
    "ksearch/tools/timing/stats.py::UndisturbedSamples.should_stop: gpumode_should_stop(... max_wall_s=math.inf, "
    "max_repeats=runs + 1 ...) -> gpumode_should_stop(... max_wall_s=runs + 1, max_repeats=math.inf ...)": (
        "the inner rule gets a wall time of 0.0, never over runs + 1, and an infinite repeat cap is never reached"
    ),
    "ksearch/tools/evaluator/parent/ledger_rules.py::_pairs: before.run == after.run and before.closed is not None -> "
    "before.run == after.run": "the windows come from by_config(), which keeps closed windows only",
    "ksearch/tools/evaluator/parent/ledger_rules.py::_spread_problem: blocks and medians < SPREAD_RATIO * sums -> "
    "medians < SPREAD_RATIO * sums": "without blocks both sums are 0, and 0 < 0.5 * 0 is false",
    "ksearch/nodes/prune.py::promotion_decision: not decision.needs_comparison or best is None -> not "
    "decision.needs_comparison": (
        "decide() asks for a comparison only when there is an incumbent, so best is never None then"
    ),
    "ksearch/agent/selection.py::_sort_key: 0 -> 1": (
        "every frontier node descends from the root: its top branch is a child of the root, which _branch_cycles "
        "always counts, so the default is never read"
    ),
    "ksearch/agent/selection.py::frontier_report: 0 -> 1": "as for _sort_key: the default is never read",
    "ksearch/agent/selection.py::_is_deferred: node.action is not None and (not node.pinned) and "
    "(node.action.difficulty > policy.max_difficulty) -> not node.pinned and node.action.difficulty > "
    "policy.max_difficulty": "only frontier nodes are judged, and every one has an action",
    "ksearch/agent/selection.py::select_actions: n <= 0 -> n < 0": (
        "for n = 0 the slice [:0] is [] like the early return"
    ),
    "ksearch/agent/edit_ops.py::format_validation_error: err['type'] == 'extra_forbidden' and loc -> err['type'] == "
    "'extra_forbidden'": "pydantic's extra_forbidden errors always name the extra field in loc",
    "ksearch/agent/edits.py::_add_node: new.id is not None and s.taken(new.id) -> s.taken(new.id)": (
        "taken(None) is False: no node has the id None"
    ),
    "ksearch/agent/edits.py::_apply_delete: node.parent_id or ROOT_ID -> node.parent_id": (
        "the root cannot be deleted and every other node has a parent"
    ),
    "ksearch/agent/world_model.py::WorldModel.frontier: not node.is_action or node.id == ROOT_ID or "
    "self.is_pruned(node.id) -> not node.is_action or self.is_pruned(node.id)": (
        "the root has no parent, and the frontier skips parentless nodes two lines below"
    ),
    "ksearch/agent/world_model.py::WorldModel.best_node: n.solution and n.solution.score is not None -> "
    "n.solution.score is not None": "solved_nodes() holds only nodes with a solution",
    "ksearch/agent/world_model.py::WorldModel.best_node: n.solution.score or 0.0 -> n.solution.score": (
        "only scored nodes are sorted, and `or 0.0` maps the one falsy score, 0.0, to itself"
    ),
    "ksearch/tasks/base.py::Task.check: form is not None or output.numel() == 0 -> form is not None": (
        "an empty output has no value outside the tolerance: tolerance_mismatch returns None for it too"
    ),
    "ksearch/tasks/base.py::tolerance_mismatch: 1.0 -> 2.0": (
        "the initial worst excess (-1) is replaced by the first element counted outside the tolerance, whose excess is "
        "> 0, before it is read"
    ),
    "ksearch/tasks/base.py::tolerance_mismatch: 0 -> 1 #2": (
        "the initial worst position is replaced with the worst excess, before it is read"
    ),
    "ksearch/tasks/base.py::_count_outside: sub(... g, e ...) -> sub(... e, g ...)": "|g - e| == |e - g| exactly",
    "ksearch/tools/fingerprint.py::task_signature: True -> False": (
        "the configs hash is compared only with itself; either key order is deterministic (a change of order after an "
        "upgrade misses the cache once, like a harness version bump, and never reuses a wrong verdict)"
    ),
    "ksearch/tools/fingerprint.py::DeviceInfo.describe: self.gpu or '' -> self.gpu": (
        "describe returns before this line when gpu is None, and an empty name is '' either way"
    ),
    "ksearch/store/store.py::ensure_comparison: True -> False": (
        "the stored report is read back with json.loads: the key order is lost either way"
    ),
    "ksearch/tools/integrity/caching.py::CachingRules._replayed_outputs: isinstance(n, ast.Return) and n.value is "
    "not None -> isinstance(n, ast.Return)": "a bare return has no root and no lookup: it adds nothing either way",
    "ksearch/tools/integrity/caching.py::CachingRules._fingerprint: self.resolve(node.func) or '' -> "
    "self.resolve(node.func)": "matches() returns None for None as for ''",
    "ksearch/tools/integrity/caching.py::CachingRules._fingerprint: params | tainted -> params": (
        "a tainted name is found when the walk reaches the name itself"
    ),
    "ksearch/tools/integrity/caching.py::CachingRules._fingerprint: params | tainted -> tainted": (
        "a parameter is found when the walk reaches the bare attribute (x.data_ptr)"
    ),
    "ksearch/tools/integrity/caching.py::CachingRules._fingerprint: any((self._is_input(a, params) or "
    "self._fingerprint(a, tainted, params) for a in node.args)) -> all((self._is_input(a, params) or "
    "self._fingerprint(a, tainted, params) for a in node.args))": (
        "id and hash take one argument; for the other builtins a skipped branch lets the walk reach the same "
        "fingerprinted argument"
    ),
    "ksearch/tools/integrity/caching.py::CachingRules._fingerprint: self._is_input(a, params) or "
    "self._fingerprint(a, tainted, params) -> self._is_input(a, params)": (
        "the test only decides whether to answer early: when it is skipped the walk reaches the same argument"
    ),
    "ksearch/tools/integrity/caching.py::CachingRules._fingerprint: self.is_builtin(node.func, "
    "FINGERPRINT_BUILTINS) and any((self._is_input(a, params)... -> any((self._is_input(a, params)...": (
        "every answer of the walk is True: a call other than id or hash answers only when an argument is "
        "fingerprinted, which the walk finds when it reaches that argument, and id and hash are in the list"
    ),
    "ksearch/tools/integrity/caching.py::CachingRules._fingerprint: ...t({'id', 'hash'})) is not None or "
    "any((self._fingerprint(a, tainted, params) for a in node.args)) -> ...t({'id', 'hash'})) is not None": (
        "a fingerprinted argument of another builtin is found when the walk reaches it (no answer is False)"
    ),
    "ksearch/tools/integrity/caching.py::CachingRules._fingerprint: any((self._fingerprint(a, tainted, params) for "
    "a in node.args)) -> all((self._fingerprint(a, tainted, params) for a in node.args))": (
        "as above: for id and hash the first test decides, for the others the walk reaches the argument"
    ),
    "ksearch/tools/integrity/reach.py::ReachRules._reach_call: name and matches(name, ATTRGETTERS) -> matches(name, "
    "ATTRGETTERS)": "matches(None, ...) is None",
    "ksearch/tools/integrity/reach.py::ReachRules._reach_call: name and matches(name, DENIED_CALLS) -> "
    "matches(name, DENIED_CALLS)": "matches(None, ...) is None",
    "ksearch/tools/integrity/reach.py::ReachRules._reach_call: name and matches(name, ANNOTATION_EVALUATORS) -> "
    "matches(name, ANNOTATION_EVALUATORS)": "matches(None, ...) and matches('', ...) are None",
    "ksearch/tools/integrity/reach.py::ReachRules._named_attribute: isinstance(target, ast.Attribute) and "
    "_plain_chain(target) -> _plain_chain(target)": (
        "_plain_chain holds only for a name or an attribute chain over one, and a bare name passes the first test"
    ),
    "ksearch/tools/integrity/reach.py::ReachRules._named_attribute: base and plain and self._is_module_name(base) "
    "-> plain and self._is_module_name(base)": "a plain chain always resolves to a dotted name, never None",
    "ksearch/tools/integrity/reach.py::ReachRules._starts_with_letter: isinstance(first, ast.Constant) and "
    "bool(SAFE_NAME_START.match(str(first.value))) -> bool(SAFE_NAME_START.match(str(first.value)))": (
        "str() of a formatted value's AST node starts with '<', never a letter"
    ),
    "ksearch/tools/integrity/reach_lists.py::private_status: dotted.startswith(entry) or "
    "dotted == entry.rstrip('.') -> dotted.startswith(entry)": (
        "only 'torch.ops.' ends with a dot, and 'torch.ops' has no private step, so it is never judged here"
    ),
    "ksearch/tools/integrity/writes.py::WriteRules._env_use_allowed: isinstance(parent, ast.Subscript) and "
    "parent.value is node -> isinstance(parent, ast.Subscript)": (
        "os.environ as an index is no constant build variable: refused either way"
    ),
    "ksearch/tools/integrity/writes.py::WriteRules._env_use_allowed: isinstance(parent, ast.Compare) and "
    "len(parent.ops) == 1 and (parent.comparators[0] is node) -> isinstance(parent, ast.Compare) and "
    "len(parent.ops) == 1": (
        "with one operator os.environ is the comparator or the left operand, and as the left operand it is no constant "
        "build variable: refused either way"
    ),
    "ksearch/tools/integrity/writes.py::WriteRules._env_use_allowed: isinstance(parent, ast.Attribute) and "
    "parent.value is node -> isinstance(parent, ast.Attribute)": "the only child of an attribute node is its value",
    "ksearch/tools/integrity/writes.py::_settable: False -> True": (
        "a target without a dotted name holds no module attribute for the loop below to find either"
    ),
}
"""Mutants that cannot change what the module decides, by ``Mutant.key``, with the reason."""


# -- operators ------------------------------------------------------------------------------------------------------

OPERATORS: dict[str, str] = {
    "boundary": "off by one at a comparison: < <-> <=, > <-> >=",
    "negate": "a comparison flipped: < -> >=, == <-> !=, is <-> is not, in <-> not in",
    "arithmetic": "+ <-> -, * <-> /, // -> *, ** -> *",
    "drop-term": "an operand dropped: a + b -> a or b, a * b -> a or b, a - b -> a, a / b -> a, a | b -> a or b",
    "bool-op": "and <-> or",
    "drop-condition": "one operand of an and/or dropped",
    "invert": "a boolean inverted: not x -> x, if x -> if not x, True <-> False, -x -> x",
    "constant": "a number tweaked: an int + 1 (unless compared directly: see boundary), a float doubled (0.0 -> 1.0)",
    "swap-args": "two neighbouring arguments of a call swapped (positional, or keyword values; not literals)",
    "min-max": "min <-> max, any <-> all",
    "membership": "one element dropped from a literal set tested with in / startswith / endswith",
}

_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_NEGATE = {
    ast.Lt: ast.GtE,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
    ast.GtE: ast.Lt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_ARITHMETIC = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Pow: ast.Mult,
}
_DROP_SIDES = {
    ast.Add: ("left", "right"),
    ast.Mult: ("left", "right"),
    ast.Sub: ("left",),
    ast.Div: ("left",),
    ast.FloorDiv: ("left",),
    ast.BitOr: ("left", "right"),
    ast.BitAnd: ("left", "right"),
}
_SWAPPED_NAMES = {"min": "max", "max": "min", "any": "all", "all": "any"}
_NO_SWAP = frozenset(
    {"isinstance", "issubclass", "getattr", "hasattr", "setattr", "delattr", "print", "min", "max", "format", "finding"}
)
"""Calls whose neighbouring arguments are not swapped: a type error at once, or commutative."""
_LOGGERS = frozenset({"log", "logger", "logging", "warnings", "structlog"})
_MEMBERSHIP_MAX = 12
"""Literal sets up to this many elements get one mutant per element dropped (longer ones are tables)."""


@dataclass(frozen=True)
class Mutant:
    """One mutation of one module: where, what, and the mutated source."""

    path: str
    line: int
    function: str
    """Qualified name of the enclosing function or class ('<module>' at module level)."""
    operator: str
    before: str
    after: str
    source: str = field(repr=False)
    occurrence: int = 1
    """The n-th mutant of the function with the same operator and texts (``0`` -> ``1`` twice in one tuple)."""

    @property
    def key(self) -> str:
        """Stable across edits elsewhere in the file: the function and the code, not the line."""
        suffix = f" #{self.occurrence}" if self.occurrence > 1 else ""
        return f"{self.path}::{self.function}: {self.before} -> {self.after}{suffix}"

    def describe(self) -> str:
        return f"{self.path}:{self.line} [{self.operator}] {self.function}: `{self.before}` -> `{self.after}`"


@dataclass(frozen=True)
class _Edit:
    """Replace the source between two byte offsets."""

    start: int
    end: int
    text: str


def _shorten(text: str, limit: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _focus(before: str, after: str, limit: int = 100, context: int = 30) -> tuple[str, str]:
    """The two texts, or where they are long, only where they differ with ``context`` characters either side: the
    mutant's description (and its key in ``EQUIVALENT``) says exactly what changed."""
    b, a = " ".join(before.split()), " ".join(after.split())
    if len(b) <= limit and len(a) <= limit:
        return b, a
    start = 0
    while start < min(len(b), len(a)) and b[start] == a[start]:
        start += 1
    end = 0
    while end < min(len(b), len(a)) - start and b[len(b) - 1 - end] == a[len(a) - 1 - end]:
        end += 1
    head = max(0, start - context)

    def cut(text: str) -> str:
        tail = min(len(text), len(text) - end + context)
        return ("..." if head else "") + text[head:tail] + ("..." if tail < len(text) else "")

    return cut(b), cut(a)


class _Source:
    """A module's text with byte offsets for AST positions (``col_offset`` counts UTF-8 bytes)."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.line_starts = [0]
        for index, byte in enumerate(self.data):
            if byte == 0x0A:
                self.line_starts.append(index + 1)

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.line_starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        end = self.line_starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        return start, end

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode("utf-8")

    def apply(self, edits: list[_Edit]) -> str:
        out = self.data
        for edit in sorted(edits, key=lambda e: e.start, reverse=True):
            out = out[: edit.start] + edit.text.encode("utf-8") + out[edit.end :]
        return out.decode("utf-8")


def _is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _is_logging(node: ast.Call) -> bool:
    func = node.func
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in _LOGGERS


def _swappable(node: ast.AST) -> bool:
    """A value that could stand where its neighbour stands: not a literal (``get(k, [])``, ``f(x, False)``: a type
    error or nonsense at once), not text, not a lambda."""
    literal = (
        ast.Constant,
        ast.JoinedStr,
        ast.List,
        ast.Tuple,
        ast.Dict,
        ast.Set,
        ast.ListComp,
        ast.DictComp,
        ast.SetComp,
        ast.GeneratorExp,
        ast.Lambda,
    )
    return not isinstance(node, literal)


def _literal_elements(node: ast.AST) -> list[ast.AST] | None:
    """The elements of a small literal set of constants (tuple, list, set, or a short string of letters)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and 2 <= len(node.elts) <= _MEMBERSHIP_MAX:
        if all(isinstance(e, ast.Constant) for e in node.elts):
            return list(node.elts)
    return None


class _Finder(ast.NodeVisitor):
    """Walks a module and collects (node, operator, edits, before, after) for every mutation it allows."""

    def __init__(self, source: _Source, functions: tuple[str, ...]) -> None:
        self.source = source
        self.functions = functions
        self.scope: list[str] = []
        self.compared: set[int] = set()
        """Integer constants compared directly (their tweak would repeat a boundary mutant)."""
        self.found: list[tuple[ast.AST, str, str, list[_Edit], str, str]] = []

    # -- scope --------------------------------------------------------------------------------------------------------
    @property
    def qualname(self) -> str:
        return ".".join(self.scope) or "<module>"

    def _wanted(self) -> bool:
        if not self.functions:
            return True
        name = self.qualname
        return any(name == f or name.startswith(f + ".") for f in self.functions)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        args = node.args
        for default in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            self.visit(default)
        for statement in node.body:
            self.visit(statement)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - ast.NodeVisitor's naming

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.visit(statement)
            else:
                self._constant_assignment(statement)
        self.scope.pop()

    def visit_Module(self, node: ast.Module) -> None:
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.visit(statement)
            else:
                self._constant_assignment(statement)

    def _constant_assignment(self, statement: ast.stmt) -> None:
        """Outside functions only ``NAME = <number>`` (or ``NAME: T = <number>``) is mutated: thresholds, not tables."""
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        if value is None:
            return
        name = None
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            name = statement.targets[0].id
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            name = statement.target.id
        number = value.operand if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) else value
        if name is None or not (
            _is_number(number) or (isinstance(number, ast.Constant) and isinstance(number.value, bool))
        ):
            return
        self.scope.append(name)
        self.visit(value)
        self.scope.pop()

    # -- what is never mutated ----------------------------------------------------------------------------------------
    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return

    def visit_Assert(self, node: ast.Assert) -> None:
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_arg(self, node: ast.arg) -> None:
        return

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.body)

    # -- operators ----------------------------------------------------------------------------------------------------
    def _add(self, node: ast.AST, operator: str, edits: list[_Edit], before: str, after: str) -> None:
        if self._wanted():
            self.found.append((node, operator, self.qualname, edits, *_focus(before, after)))

    def _replace(self, node: ast.AST, operator: str, mutated: ast.AST) -> None:
        """Replace ``node`` by ``mutated`` (parenthesised, so precedence around it cannot change)."""
        if ast.dump(mutated) == ast.dump(node):
            return
        start, end = self.source.span(node)
        after = ast.unparse(mutated)
        self._add(node, operator, [_Edit(start, end, f"({after})")], ast.unparse(node), after)

    def visit_Compare(self, node: ast.Compare) -> None:
        for side in (node.left, *node.comparators):  # ``n < 2`` -> ``n < 3`` is ``n <= 2``: the boundary operator's
            if isinstance(side, ast.Constant) and type(side.value) is int:
                self.compared.add(id(side))
        for index, op in enumerate(node.ops):
            for operator, table in (("boundary", _BOUNDARY), ("negate", _NEGATE)):
                replacement = table.get(type(op))
                if replacement is not None:
                    mutated = copy.deepcopy(node)
                    mutated.ops[index] = replacement()
                    self._replace(node, operator, mutated)
            if isinstance(op, (ast.In, ast.NotIn)):
                self._membership(node, node.comparators[index], node)
        self.generic_visit(node)

    def _membership(self, owner: ast.AST, collection: ast.AST, display: ast.AST) -> None:
        """Drop one element of a literal set (``x in ("a", "b")``, ``c in "wax+"``)."""
        elements = _literal_elements(collection)
        if elements is not None:
            for element in elements:
                rest = [e for e in elements if e is not element]
                kept = (
                    ast.Set(elts=rest)
                    if isinstance(collection, ast.Set)
                    else type(collection)(elts=rest, ctx=ast.Load())
                )
                start, end = self.source.span(collection)
                text = ast.unparse(kept) if rest else "()"
                self._add(owner, "membership", [_Edit(start, end, text)], ast.unparse(collection), text)
        elif isinstance(collection, ast.Constant) and isinstance(collection.value, str):
            letters = collection.value
            if 2 <= len(letters) <= _MEMBERSHIP_MAX:
                for position in range(len(letters)):
                    kept = letters[:position] + letters[position + 1 :]
                    start, end = self.source.span(collection)
                    self._add(owner, "membership", [_Edit(start, end, repr(kept))], repr(letters), repr(kept))

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if _is_text(node.left) or _is_text(node.right) or isinstance(node.op, ast.Mod):
            return  # string building and %-formatting: messages
        replacement = _ARITHMETIC.get(type(node.op))
        if replacement is not None:
            mutated = copy.deepcopy(node)
            mutated.op = replacement()
            self._replace(node, "arithmetic", mutated)
        for side in _DROP_SIDES.get(type(node.op), ()):
            self._replace(node, "drop-term", copy.deepcopy(getattr(node, side)))
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        replacement = _ARITHMETIC.get(type(node.op))
        if replacement is not None:
            mutated = copy.deepcopy(node)
            mutated.op = replacement()
            start, end = self.source.span(node)
            self._add(
                node, "arithmetic", [_Edit(start, end, ast.unparse(mutated))], ast.unparse(node), ast.unparse(mutated)
            )
        self.visit(node.value)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        mutated = copy.deepcopy(node)
        mutated.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        self._replace(node, "bool-op", mutated)
        for index in range(len(node.values)):
            rest = [copy.deepcopy(v) for i, v in enumerate(node.values) if i != index]
            dropped = rest[0] if len(rest) == 1 else ast.BoolOp(op=copy.deepcopy(node.op), values=rest)
            self._replace(node, "drop-condition", dropped)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            self._replace(node, "invert", copy.deepcopy(node.operand))
        elif isinstance(node.op, ast.USub) and not _is_number(node.operand):
            self._replace(node, "invert", copy.deepcopy(node.operand))
        self.generic_visit(node)

    def _negate_test(self, test: ast.expr) -> None:
        """``if x`` -> ``if not x`` where no other operator already inverts the test (comparisons, and/or, not)."""
        if not isinstance(test, (ast.Compare, ast.BoolOp, ast.UnaryOp)) and not (isinstance(test, ast.Constant)):
            self._replace(test, "invert", ast.UnaryOp(op=ast.Not(), operand=copy.deepcopy(test)))

    def visit_If(self, node: ast.If) -> None:
        self._negate_test(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate_test(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._negate_test(node.test)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for test in node.ifs:
            self._negate_test(test)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, bool):
            self._replace(node, "invert", ast.Constant(not node.value))
        elif isinstance(node.value, int) and id(node) not in self.compared:
            self._replace(node, "constant", ast.Constant(node.value + 1))
        elif isinstance(node.value, float):
            self._replace(node, "constant", ast.Constant(node.value * 2 if node.value else 1.0))

    def visit_Call(self, node: ast.Call) -> None:
        if _is_logging(node):
            return
        name = _call_name(node)
        if isinstance(node.func, ast.Name) and name in _SWAPPED_NAMES:
            mutated = copy.deepcopy(node)
            mutated.func = ast.Name(id=_SWAPPED_NAMES[name], ctx=ast.Load())
            self._replace(node, "min-max", mutated)
        if name not in _NO_SWAP:
            self._swaps(node, name)
        if name in ("startswith", "endswith") and node.args:
            self._membership(node, node.args[0], node)
        self.generic_visit(node)

    def _swaps(self, node: ast.Call, name: str) -> None:
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(positional) == len(node.args):
            for left, right in zip(positional, positional[1:]):
                self._swap(node, name, left, right, "", "")
        keywords = [k for k in node.keywords if k.arg is not None]
        for left, right in zip(keywords, keywords[1:]):
            self._swap(node, name, left.value, right.value, f"{left.arg}=", f"{right.arg}=")

    def _swap(self, node: ast.Call, name: str, left: ast.expr, right: ast.expr, left_kw: str, right_kw: str) -> None:
        if not (_swappable(left) and _swappable(right)):
            return
        a, b = self.source.segment(left), self.source.segment(right)
        if ast.dump(left) == ast.dump(right):
            return
        (a_start, a_end), (b_start, b_end) = self.source.span(left), self.source.span(right)
        edits = [_Edit(a_start, a_end, b), _Edit(b_start, b_end, a)]
        before = f"{name}(... {left_kw}{ast.unparse(left)}, {right_kw}{ast.unparse(right)} ...)"
        after = f"{name}(... {left_kw}{ast.unparse(right)}, {right_kw}{ast.unparse(left)} ...)"
        self._add(node, "swap-args", edits, before, after)


def mutants_of(path: str, text: str, functions: tuple[str, ...] = (), *, validate: bool = True) -> list[Mutant]:
    """Every mutant of the module ``text`` (at ``path``), in source order, no two the same program. ``validate``
    parses each one (a few seconds for all targets): every mutant is valid code whose AST differs from the
    original's; without it (the unit tests) only the cheap checks at the mutated node are made."""
    tree = ast.parse(text)
    original = ast.dump(tree) if validate else ""
    source = _Source(text)
    finder = _Finder(source, functions)
    finder.visit(tree)
    seen: set[str] = set()
    out = []
    for node, operator, function, edits, before, after in finder.found:
        mutated = source.apply(edits)
        identity = mutated
        if validate:
            try:
                identity = ast.dump(ast.parse(mutated))
            except SyntaxError as exc:  # a bug of this script, not of the module: say so, never count it
                print(
                    f"warning: {path}:{node.lineno} [{operator}] makes invalid code ({exc.msg}); skipped",
                    file=sys.stderr,
                )
                continue
        if identity == original or identity in seen:
            continue
        seen.add(identity)
        same = sum(1 for m in out if (m.function, m.before, m.after) == (function, before, after))
        out.append(Mutant(path, node.lineno, function, operator, before, after, mutated, occurrence=same + 1))
    return out


# -- running --------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    mutant: str
    """``Mutant.describe()``, or 'baseline' for the unmutated run."""
    key: str
    status: str
    """'killed', 'timeout' (counted as killed), 'survived', 'equivalent' (survived, and listed in EQUIVALENT),
    'error' (the tests could not run: a usage error or no tests collected)."""
    seconds: float
    detail: str = ""
    """The first failing test, or the tail of the output for errors."""


@dataclass
class _Job:
    target: Target
    mutant: Mutant | None
    """None: the baseline run."""


@dataclass
class _Slot:
    root: Path
    job: _Job | None = None
    pid: int | None = None
    process: subprocess.Popen | None = None
    started: float = 0.0
    timeout: float = 0.0
    written: str | None = None
    """The path (relative) whose mutant is on disk in this copy."""

    @property
    def log(self) -> Path:
        return self.root / ".mutation.log"


def _copy_repository(destination: Path) -> None:
    shutil.copytree(
        REPO,
        destination,
        ignore=shutil.ignore_patterns(
            ".git", "__pycache__", "*.pyc", ".venv", ".pytest_cache", "workspace", "*.egg-info"
        ),
    )


def preload(targets: list[Target]) -> int:
    """Import here the third-party modules that the targets' tests import (pytest's plugins included), found by
    collecting those tests in a throwaway interpreter, so that forked children start warm; then freeze them out of
    the garbage collector's reach (pytest collects twice per session: over thousands of modules, 0.8 s a run).
    ``ksearch`` and ``tests`` are never imported here."""
    tests = sorted({t.split("::")[0] for target in targets for t in target.tests})
    with tempfile.TemporaryDirectory() as scratch:
        listing = Path(scratch) / "modules.json"
        probe = (
            "import json, sys, pytest\n"
            f"pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', *{tests!r}])\n"
            "local = ('ksearch', 'tests', 'bench', '__main__', 'conftest')\n"
            f"open({str(listing)!r}, 'w').write(json.dumps([m for m in sys.modules if m.split('.')[0] not in local]))\n"
        )
        out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=False)
        try:
            names = json.loads(listing.read_text())
        except (OSError, json.JSONDecodeError):
            print(
                f"warning: could not list the tests' imports; children start cold\n{out.stdout[-2000:]}",
                file=sys.stderr,
            )
            return 0
    _as_conftest_does()
    loaded = 0
    for name in names:
        try:
            importlib.import_module(name)
            loaded += 1
        except BaseException:  # noqa: BLE001, S110 - a module that imports only in its parent's context: the child will
            pass
    for name in list(sys.modules):
        if name.split(".")[0] in ("ksearch", "tests"):
            raise RuntimeError(f"preloading imported {name}: forked children would test the unmutated module")
    gc.collect()
    gc.freeze()
    return loaded


def _as_conftest_does() -> None:
    """tests/conftest.py sets TRITON_INTERPRET before anything imports triton; the preload imports triton first."""
    try:
        import torch

        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
    except Exception:  # noqa: BLE001
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _child_environment(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


_STAMPS = iter(range(int(time.time()) + 10, 1 << 31))


def _write(path: Path, text: str) -> None:
    """Write a module with an mtime no earlier write had: a .pyc is reused when the source's size and mtime (in whole
    seconds) match, and a mutant often has the original's size (``<`` -> ``>``)."""
    path.write_text(text, encoding="utf-8")
    stamp = next(_STAMPS)
    os.utime(path, (stamp, stamp))


def _restore(slot: _Slot) -> None:
    if slot.written is not None:
        _write(slot.root / slot.written, (REPO / slot.written).read_text(encoding="utf-8"))
        slot.written = None


def _start(slot: _Slot, job: _Job, timeout: float, spawn: bool) -> None:
    _restore(slot)
    if job.mutant is not None:
        _write(slot.root / job.mutant.path, job.mutant.source)
        slot.written = job.mutant.path
    slot.job, slot.started, slot.timeout = job, time.monotonic(), timeout
    if not job.target.tests:
        raise ValueError(f"no tests named for {job.target.path}: pytest would run the whole suite")
    arguments = [*PYTEST_ARGS, *job.target.tests]
    if spawn:
        with open(slot.log, "wb") as log:
            slot.process = subprocess.Popen(
                [sys.executable, "-m", "pytest", *arguments],
                cwd=slot.root,
                env=_child_environment(slot.root),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        slot.pid = slot.process.pid
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        slot.pid, slot.process = pid, None
        return
    code = 99
    try:  # the child: its own process group (a timeout kills what its tests started), output to the log
        os.setpgid(0, 0)
        fd = os.open(slot.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(slot.root)
        os.environ.clear()
        os.environ.update(_child_environment(slot.root))
        sys.path[:] = [str(slot.root), *[p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"]]
        import pytest

        code = int(pytest.main(arguments))
    except BaseException:  # noqa: BLE001 - report anything, exit with our own code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _poll(slot: _Slot) -> int | None:
    """The exit code when the slot's run ended (negative: killed by that signal), else None."""
    assert slot.pid is not None
    if slot.process is not None:
        return slot.process.poll()
    pid, status = os.waitpid(slot.pid, os.WNOHANG)
    if pid == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def _stop(slot: _Slot) -> None:
    """Kill the run's process group (the child and whatever its tests started), then reap the child."""
    assert slot.pid is not None
    try:
        os.killpg(slot.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if slot.process is not None:
        slot.process.wait()
    else:
        os.waitpid(slot.pid, 0)


def _first_failure(text: str) -> str:
    for line in text.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return _shorten(line, 200)
    return _shorten(text.strip().splitlines()[-1] if text.strip() else "", 200)


def _outcome(slot: _Slot, code: int | None, equivalent: dict[str, str]) -> Outcome:
    job = slot.job
    assert job is not None
    seconds = time.monotonic() - slot.started
    text = slot.log.read_text(encoding="utf-8", errors="replace") if slot.log.exists() else ""
    name = job.mutant.describe() if job.mutant else f"baseline of {job.target.path}"
    key = job.mutant.key if job.mutant else ""
    if code is None:
        return Outcome(name, key, "timeout", seconds, f"ran past {slot.timeout:.0f} s")
    if code == 0:
        status = "equivalent" if key in equivalent else "survived"
        return Outcome(name, key, status, seconds)
    if code in (1, 2) or code < 0:  # failed tests, an error while collecting (the mutant broke an import), a signal
        return Outcome(name, key, "killed", seconds, _first_failure(text))
    return Outcome(name, key, "error", seconds, f"exit code {code}: {_shorten(text[-600:], 400)}")


def run_jobs(
    jobs: list[_Job], slots: list[_Slot], timeout_of, spawn: bool, equivalent: dict[str, str], report
) -> list[tuple[_Job, Outcome]]:
    """Run every job, ``len(slots)`` at a time; ``report(job, outcome)`` is called as each ends."""
    pending = collections.deque(jobs)
    done: list[tuple[_Job, Outcome]] = []
    while pending or any(s.job is not None for s in slots):
        for slot in slots:
            if slot.job is None and pending:
                job = pending.popleft()
                _start(slot, job, timeout_of(job), spawn)
        for slot in slots:
            if slot.job is None:
                continue
            code = _poll(slot)
            if code is None and time.monotonic() - slot.started > slot.timeout:
                _stop(slot)
                outcome = _outcome(slot, None, equivalent)
            elif code is None:
                continue
            else:
                outcome = _outcome(slot, code, equivalent)
            done.append((slot.job, outcome))
            report(slot.job, outcome)
            slot.job, slot.pid, slot.process = None, None, None
        time.sleep(0.02)
    for slot in slots:  # leave each copy as the repository is
        _restore(slot)
    return done


# -- report ---------------------------------------------------------------------------------------------------------


def table(results: list[tuple[Target, list[Outcome]]]) -> str:
    """The per-module table (markdown), with a total row."""
    header = "| module | mutants | killed (timeouts) | equivalent | survived | errors | kill rate |"
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|"]
    totals = collections.Counter()
    for target, outcomes in results:
        counts = collections.Counter(o.status for o in outcomes)
        counts["mutants"] = len(outcomes)
        totals.update(counts)
        lines.append(_row(target.path, counts))
    lines.append(_row("**all**", totals))
    return "\n".join(lines)


def _row(name: str, counts: collections.Counter) -> str:
    killed = counts["killed"] + counts["timeout"]
    judged = counts["mutants"] - counts["equivalent"] - counts["error"]
    rate = f"{100.0 * killed / judged:.1f}%" if judged else "-"
    return (
        f"| {name} | {counts['mutants']} | {killed} ({counts['timeout']}) | {counts['equivalent']} | "
        f"{counts['survived']} | {counts['error']} | {rate} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", action="append", default=[], help="only targets whose path contains this")
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="mutants run at once")
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per mutant (default: 5 x its module's baseline + 20)"
    )
    parser.add_argument("--spawn", action="store_true", help="a fresh `python -m pytest` per mutant instead of fork")
    parser.add_argument("--json", type=Path, default=None, help="write every outcome to this file")
    args = parser.parse_args(argv)

    targets = [t for t in TARGETS if not args.module or any(m in t.path for m in args.module)]
    if not targets:
        parser.error(f"no target matches {args.module}; targets: {', '.join(t.path for t in TARGETS)}")
    mutants = {t.path: mutants_of(t.path, (REPO / t.path).read_text(encoding="utf-8"), t.functions) for t in targets}
    if args.list:
        for target in targets:
            print(f"{target.path}: {len(mutants[target.path])} mutants")
            for mutant in mutants[target.path]:
                print(f"  {mutant.describe()}")
        return 0
    empty = [t.path for t in targets if not t.tests]
    if empty:  # pytest without paths would run the whole suite for every mutant
        parser.error(f"no tests named for {', '.join(empty)} in TARGETS")
    missing = [t for target in targets for t in target.tests if not (REPO / t.split("::")[0]).exists()]
    if missing:
        parser.error(f"test files named in TARGETS do not exist: {', '.join(missing)}")

    began = time.monotonic()
    loaded = 0 if args.spawn else preload(targets)
    scratch = Path(tempfile.mkdtemp(prefix="ksearch-mutation-"))
    try:
        slots = []
        for index in range(max(1, args.jobs)):
            _copy_repository(scratch / f"copy{index}")
            slots.append(_Slot(scratch / f"copy{index}"))
        print(
            f"{sum(len(m) for m in mutants.values())} mutants in {len(targets)} modules; {len(slots)} at a time; "
            f"{'a fresh interpreter per mutant' if args.spawn else f'forked after preloading {loaded} modules'}",
            flush=True,
        )

        baselines: dict[str, Outcome] = {}

        def note(job: _Job, outcome: Outcome) -> None:
            if job.mutant is None:
                baselines[job.target.path] = outcome
                print(
                    f"baseline {job.target.path}: {outcome.status} in {outcome.seconds:.1f} s"
                    + (f" ({outcome.detail})" if outcome.detail else ""),
                    flush=True,
                )
            else:
                mark = {"killed": ".", "timeout": "T", "survived": "S", "equivalent": "e", "error": "E"}[outcome.status]
                print(mark, end="", flush=True)

        run_jobs([_Job(t, None) for t in targets], slots, lambda job: 600.0, args.spawn, EQUIVALENT, note)
        healthy = [t for t in targets if baselines[t.path].status == "survived"]
        for target in targets:
            if target not in healthy:
                print(f"warning: {target.path}'s tests fail unmutated; its mutants are not run", file=sys.stderr)

        def timeout_of(job: _Job) -> float:
            return args.timeout or 5 * baselines[job.target.path].seconds + 20

        jobs = [_Job(t, m) for t in healthy for m in mutants[t.path]]
        done = run_jobs(jobs, slots, timeout_of, args.spawn, EQUIVALENT, note)
        print()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    by_target = {t.path: [] for t in healthy}
    for job, outcome in done:
        by_target[job.target.path].append(outcome)
    results = [(t, by_target[t.path]) for t in healthy]
    print(table(results))
    survivors = [o for _, outcomes in results for o in outcomes if o.status == "survived"]
    print(f"\nSurvivors ({len(survivors)}):")
    for outcome in survivors:
        print(f"  {outcome.mutant}")
    equivalents = [o for _, outcomes in results for o in outcomes if o.status == "equivalent"]
    if equivalents:
        print(f"\nEquivalent mutants, not counted ({len(equivalents)}):")
        for outcome in equivalents:
            print(f"  {outcome.mutant}\n      {EQUIVALENT[outcome.key]}")
    errors = [o for _, outcomes in results for o in outcomes if o.status == "error"]
    for outcome in errors:
        print(f"error: {outcome.mutant}: {outcome.detail}", file=sys.stderr)
    keys = {m.key for t in healthy for m in mutants[t.path]}
    for key in EQUIVALENT:
        if any(key.startswith(t.path + "::") for t in healthy) and key not in keys:
            print(f"warning: EQUIVALENT names a mutant that no longer exists: {key}", file=sys.stderr)
    for _, outcomes in results:
        for outcome in outcomes:
            if outcome.status in ("killed", "timeout") and outcome.key in EQUIVALENT:
                print(f"warning: listed as equivalent but killed: {outcome.mutant}", file=sys.stderr)
    print(f"\n{time.monotonic() - began:.0f} s in all")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "baselines": {k: asdict(v) for k, v in baselines.items()},
                    "outcomes": [asdict(o) for _, outcomes in results for o in outcomes],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
