"""fast_p and geomean speedup; a resumable sweep over two KernelBench problems driven by scripted replies."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ksearch.flows import run as runner
from ksearch.flows.metrics import fast_p, geomean_speedup, summary
from ksearch.flows.sweep import SweepSpec, load_manifest, manifest_path, run_sweep, sweep_name
from tests.helpers.scripts import fenced, init_plan, write_script

DATA = Path(__file__).resolve().parent / "tasks" / "data" / "kernelbench"

RESULTS = [
    {"correct": True, "speedup": 2.5},
    {"correct": True, "speedup": 1.2},
    {"correct": True, "speedup": 0.8},
    {"correct": False, "speedup": None},  # no correct kernel: counts in the denominator
    {"correct": False, "speedup": 3.0},  # a speedup without correctness counts for nothing
]


def test_fast_p_over_all_problems() -> None:
    assert fast_p(RESULTS, 0) == pytest.approx(3 / 5)
    assert fast_p(RESULTS, 1) == pytest.approx(2 / 5)
    assert fast_p(RESULTS, 1.5) == pytest.approx(1 / 5)
    assert fast_p(RESULTS, 2) == pytest.approx(1 / 5)
    assert fast_p(RESULTS, 2.5) == 0.0  # strictly greater
    assert fast_p([], 1) == 0.0


def test_geomean_speedup_over_correct_results() -> None:
    assert geomean_speedup(RESULTS) == pytest.approx(math.exp((math.log(2.5) + math.log(1.2) + math.log(0.8)) / 3))
    assert geomean_speedup([{"correct": False, "speedup": 2.0}]) is None
    untimed = [{"correct": True, "speedup": None}, {"correct": False, "speedup": None}]
    assert fast_p(untimed, 0) == 0.5 and fast_p(untimed, 1) == 0.0 and geomean_speedup(untimed) is None
    report = summary(RESULTS)
    assert report["n"] == 5 and report["correct"] == 3
    assert report["fast_p"] == {"0": 0.6, "1": 0.4, "1.5": 0.2, "2": 0.2}


def script_for(tmp_path: Path, problem_id: int) -> Path:
    code = (DATA / "solutions" / f"level1_{problem_id}_ok.py").read_text()
    return write_script(
        tmp_path / f"p{problem_id}.jsonl",
        [
            ("plan:0:0", init_plan([("a", 0.9)])),
            ("write:c1:1", fenced(code)),
            ("plan:1:0", json.dumps({"ops": []})),
        ],
    )


@pytest.mark.slow
def test_sweep_is_resumable(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    spec = SweepSpec(
        suite="kernelbench:1",
        model=f"replay:{tmp_path}/p{{problem}}.jsonl",
        problems="1-2",
        max_rounds=1,
        device="cpu",
        kernelbench_root=str(DATA),
        stagnation_window=1,
    )
    script_for(tmp_path, 1)  # problem 2 has no script yet: its run cannot start

    events: list[tuple[str, int]] = []
    first = run_sweep(spec, workspace=ws, on_problem=lambda e, entry: events.append((e, entry.problem_id)))
    assert events == [("start", 1), ("done", 1), ("start", 2), ("error", 2)]
    by_id = {p.problem_id: p for p in first.problems}
    assert by_id[1].status == "finished" and by_id[1].correct and by_id[1].speedup is None  # CPU: untimed
    assert by_id[2].status == "error" and "cannot read replay file" in (by_id[2].error or "")
    assert first.summary["fast_p"]["0"] == 0.5 and first.summary["fast_p"]["1"] == 0.0
    path = manifest_path(ws, sweep_name(spec))
    assert path.is_file() and load_manifest(path).entries["1"].run_id == f"{sweep_name(spec)}-p1"

    # Problem 2 gets a script, and its run is interrupted after it was created (as by Ctrl-C or a crash).
    script_for(tmp_path, 2)

    def interrupt(event: str, data: dict) -> None:
        if event == "selected":
            raise KeyboardInterrupt

    from ksearch.agent.config import RunConfig

    run_id = f"{sweep_name(spec)}-p2"
    with pytest.raises(KeyboardInterrupt):
        runner.start_run(
            RunConfig(
                run_id=run_id,
                task=load_manifest(path).entries["2"].task,
                model=f"replay:{tmp_path}/p2.jsonl",
                device="cpu",
                max_rounds=1,
                stagnation_window=1,
            ),
            workspace=ws,
            on_event=interrupt,
        )
    store = runner.open_store(ws)
    try:
        assert store.get_run(run_id)["status"] == "interrupted"
    finally:
        store.close()

    events.clear()
    second = run_sweep(spec, workspace=ws, on_problem=lambda e, entry: events.append((e, entry.problem_id)))
    assert events == [("skip", 1), ("resume", 2), ("done", 2)]
    assert [p.status for p in second.problems] == ["finished", "finished"]
    assert second.summary["correct"] == 2 and second.summary["fast_p"]["0"] == 1.0
    store = runner.open_store(ws)
    try:
        runs = [r["id"] for r in store.list_runs()]
    finally:
        store.close()
    assert sorted(runs) == [f"{sweep_name(spec)}-p1", run_id]  # nothing ran twice

    with pytest.raises(Exception, match="already exists with other settings"):
        run_sweep(spec.model_copy(update={"max_rounds": 2, "name": sweep_name(spec)}), workspace=ws)


@pytest.mark.slow
def test_sweep_command_prints_table_and_json(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ksearch.cli import app

    script_for(tmp_path, 1)
    args = [
        "--workspace",
        str(tmp_path / "ws"),
        "sweep",
        "kernelbench:1",
        "--problems",
        "1",
        "--model",
        f"replay:{tmp_path}/p{{problem}}.jsonl",
        "--max-rounds",
        "1",
        "--device",
        "cpu",
        "--kernelbench-root",
        str(DATA),
        "--stagnation-window",
        "1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "fast_0 = 1.000" in result.output and "1/1 correct" in result.output
    again = CliRunner().invoke(app, [*args, "--json"])
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout[again.stdout.index("{") :])
    assert data["summary"]["fast_p"]["0"] == 1.0 and data["problems"][0]["status"] == "finished"


@pytest.mark.slow
def test_sweep_counts_the_kernelbench_checks_and_lists_unjudgeable_problems_apart(tmp_path: Path) -> None:
    import shutil

    from typer.testing import CliRunner

    from ksearch.cli import app

    corpus = Path(__file__).resolve().parent / "tasks" / "kernelbench"
    root = tmp_path / "checkout"
    shutil.copytree(corpus / "KernelBench" / "level2", root / "KernelBench" / "level2")
    code = (corpus / "honest" / "conv_relu_bias_torch_conv.py").read_text()  # keeps the convolution in PyTorch
    write_script(
        tmp_path / "p1.jsonl",
        [("plan:0:0", init_plan([("a", 0.9)])), ("write:c1:1", fenced(code)), ("plan:1:0", json.dumps({"ops": []}))],
    )
    spec = SweepSpec(
        suite="kernelbench:2",
        model=f"replay:{tmp_path}/p{{problem}}.jsonl",
        problems="1,66",
        max_rounds=1,
        device="cpu",
        kernelbench_root=str(root),
        stagnation_window=1,
    )
    events: list[tuple[str, int]] = []
    rep = run_sweep(spec, workspace=tmp_path / "ws", on_problem=lambda e, entry: events.append((e, entry.problem_id)))
    assert events == [("start", 1), ("done", 1), ("unjudgeable", 66)]
    by_id = {p.problem_id: p for p in rep.problems}
    assert by_id[1].checks == {"reference_op": 1} and not by_id[1].correct
    assert (
        by_id[66].status == "unjudgeable" and "Dropout" in (by_id[66].error or "") and "self.eval()" in by_id[66].error
    )
    assert rep.summary["checks"] == {"reference_op": 1} and rep.summary["unjudgeable"] == [66]
    assert rep.summary["n"] == 2 and rep.summary["fast_p"]["0"] == 0.0  # KernelBench's denominator: every problem

    args = [
        "--workspace",
        str(tmp_path / "ws2"),
        "sweep",
        "kernelbench:2?allow=reference_op",
        "--problems",
        "1",
        "--model",
        f"replay:{tmp_path}/p{{problem}}.jsonl",
        "--max-rounds",
        "1",
        "--device",
        "cpu",
        "--kernelbench-root",
        str(root),
        "--stagnation-window",
        "1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the console wraps long lines
    assert "1/1 correct" in text and "(uses reference_op, allowed)" in text
    assert "rely on an allowed rule (their speedup is partly PyTorch's): reference_op 1" in text
