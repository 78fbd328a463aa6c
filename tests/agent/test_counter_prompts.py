"""The TriMul prompts the model reads carry a kernel's hardware counters: the first plan (the seed's), a later plan
(the cycle's best, and what the planner asked for, with how to ask) and the coder's first attempt (its base code's),
rendered by the real prompt builders through ``scripts/counter_prompts.py`` from counters read off the raw-page
fixtures; and a plan with no counters says nothing of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ksearch.contracts.counters import CounterReport, CounterStatus
from ksearch.contracts.evaluation import Evaluation, Timing
from ksearch.tasks.registry import resolve_task
from ksearch.tools.counters.ncu_csv import parse_raw_page, range_of, shape_counters

REPO = Path(__file__).resolve().parents[2]
NCU = REPO / "tests" / "tools" / "ncu"
_spec = importlib.util.spec_from_file_location("counter_prompts", REPO / "scripts" / "counter_prompts.py")
assert _spec is not None and _spec.loader is not None
counter_prompts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(counter_prompts)


def _evaluation(counters: CounterReport | None) -> Evaluation:
    names = [c.name for c in resolve_task("trimul").benchmark_configs("cuda")]
    timings = [
        Timing(config=n, median_ms=0.3 + 0.4 * i, mean_ms=0.3 + 0.4 * i, stdev_ms=0.01, samples=50)
        for i, n in enumerate(names)
    ]
    return Evaluation(
        verdict="passed",
        device="NVIDIA H100 80GB HBM3",
        timed=True,
        timings=timings,
        score=1.0,
        latency_ms=1.0,
        configs_passed=18,
        configs_total=18,
        counters=counters,
    )


def _counters(shapes: list[str]) -> CounterReport:
    launches = parse_raw_page((NCU / "raw_page.csv").read_text())
    shape_of = {x.id: range_of(x.name) for x in parse_raw_page((NCU / "raw_page_by_range.csv").read_text())}
    return CounterReport(
        status=CounterStatus.COLLECTED,
        shapes=shape_counters(launches, shape_of, shapes),
        tool="ncu 2025.3.0.0",
        device="NVIDIA H100 80GB HBM3",
    )


def test_the_planner_and_the_coder_read_the_counters(tmp_path: Path) -> None:
    names = [c.name for c in resolve_task("trimul").benchmark_configs("cuda")]
    code = (REPO / "examples" / "trimul_triton_fast.py").read_text()
    prompts = counter_prompts.render(_evaluation(_counters([names[-1], names[-2]])), code, tmp_path)
    assert set(prompts) == {"plan_init", "plan_update", "write_kernel"}
    for name, prompt in prompts.items():
        assert "Hardware counters (ncu 2025.3.0.0 on NVIDIA H100 80GB HBM3" in prompt, name
        assert f"  {names[-1]} (4 launches profiled)" in prompt, name
        assert "occupancy 18 % of 25 % theoretical (limited by registers)" in prompt, name
    update = prompts["plan_update"]
    assert "## Counters asked for node root (passed" in update and "`counters_for`" in update
    assert "`counters_for`" not in prompts["write_kernel"]  # only the planner can ask


def test_without_counters_the_prompts_show_none_and_the_planner_is_told_why(tmp_path: Path) -> None:
    code = (REPO / "examples" / "trimul_triton_fast.py").read_text()
    prompts = counter_prompts.render(_evaluation(None), code, tmp_path)
    assert "Hardware counters" not in prompts["plan_init"] and "Hardware counters" not in prompts["write_kernel"]
    assert "Hardware counters (" not in prompts["plan_update"]
    assert "Hardware counters: none (only a passed, timed kernel is profiled)" in prompts["plan_update"]


H100_FAILURE = (
    "ncu could not profile a contained process here: all layers (userns,mountns,netns,ipcns,caps,landlock,seccomp): "
    "failed, ==ERROR== The application returned an error code (121). (the probe's stderr: ksearch containment could "
    "not apply userns: unshare: Invalid argument); no network layers (userns,mountns,ipcns,caps,landlock (network "
    "rules open for ncu)): failed, ==ERROR== The application returned an error code (121). (the probe's stderr: "
    "ksearch containment could not apply userns: unshare: Invalid argument); no network or mount layers (userns,"
    "ipcns,caps,landlock (network rules open for ncu)): failed, ==ERROR== The application returned an error code "
    "(121). (the probe's stderr: ksearch containment could not apply userns: unshare: Invalid argument)"
)
"""What an H100 run's prompts carried, whole, in every prompt (2026-12-07: plan_update.txt, line 170)."""


def test_counters_that_failed_are_one_short_line_in_every_prompt(tmp_path: Path) -> None:
    """The planner and the coder read the status in a few words; the containment ladder's failure text (600
    characters, repeated) goes to the log and ``ksearch show``, never into a prompt."""
    code = (REPO / "examples" / "trimul_triton_fast.py").read_text()
    failed = CounterReport(status=CounterStatus.FAILED, detail=H100_FAILURE)
    prompts = counter_prompts.render(_evaluation(failed), code, tmp_path)
    for name, prompt in prompts.items():
        lines = [line for line in prompt.splitlines() if "Hardware counters" in line]
        assert lines == ["Hardware counters: not collected (failed: ncu gave no usable report)"] * len(lines), name
        assert "unshare" not in prompt and "ncu could not profile" not in prompt, name
    assert any("Hardware counters: not collected" in prompt for prompt in prompts.values())
