"""``--compete FILE``: the best known competing kernels (a solution file, evaluated on the run's device) or their
per-shape times (JSON or TOML), resolved when the run is created, kept in its config and shown to the planner with the
gap per shape (issue 57)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError
from ksearch.flows import run as runner
from ksearch.flows.compete import shape_name, times_competitors
from ksearch.tasks.trimul import TrimulTask
from tests.helpers.scripts import fenced, init_plan, row_kernel, write_script

NAMES = [c.name for c in TrimulTask().benchmark_configs("cuda")]
KERNEL = Path(__file__).resolve().parents[1] / "tasks" / "data" / "softmax_triton_ok.py"


def test_a_times_file_names_shapes_in_full_or_by_prefix(tmp_path: Path) -> None:
    path = tmp_path / "best.json"
    path.write_text(
        json.dumps({"name": "K-Search best", "where": "H100, eval.py", "times_ms": {"b0": 0.29, NAMES[6]: 3}})
    )
    (competitor,) = times_competitors(path, NAMES)
    assert competitor.name == "K-Search best" and competitor.where == "H100, eval.py"
    assert competitor.times_ms == {NAMES[0]: 0.29, NAMES[6]: 3.0} and competitor.candidate_id is None
    toml = tmp_path / "two.toml"
    toml.write_text('[[competitor]]\nname = "a"\ntimes_ms = { b1 = 1.0 }\n\n[[competitor]]\ntimes_ms = { b2 = 2.5 }\n')
    first, second = times_competitors(toml, NAMES)
    assert (first.name, first.times_ms, first.where) == ("a", {NAMES[1]: 1.0}, "as given in the file")
    assert (second.name, second.times_ms) == ("two", {NAMES[2]: 2.5})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"times_ms": {"b9": 1.0}}, "no timed shape of this task is called 'b9'"),
        ({"times_ms": {"b0": -1}}, "must be a positive number of ms"),
        ({"times_ms": {"b0": True}}, "must be a positive number of ms"),
        ({"name": "x"}, "needs times_ms"),
        ([], "expected an object"),
    ],
)
def test_a_bad_times_file_is_one_clear_error(tmp_path: Path, content: object, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(UserError, match=message):
        times_competitors(path, NAMES)
    assert shape_name("b3", NAMES, "f") == NAMES[3]
    broken = tmp_path / "broken.toml"
    broken.write_text("times_ms = {")
    with pytest.raises(UserError, match="not valid TOML"):
        times_competitors(broken, NAMES)


@pytest.mark.slow
def test_a_competing_kernel_is_evaluated_when_the_run_is_created_and_the_planner_sees_it(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [("plan:0:0", init_plan([("a", 0.9)])), ("write:c1:1", fenced(row_kernel(1)))],
    )
    times = tmp_path / "t.json"
    times.write_text(json.dumps({"name": "elsewhere", "times_ms": {"bench_4096x4096": 0.5}}))
    config = RunConfig(
        run_id="c",
        task="softmax",
        model=f"replay:{script}",
        device="cpu",
        max_rounds=1,
        compete=[str(KERNEL), str(times)],
    )
    ws = tmp_path / "ws"
    assert runner.start_run(config, workspace=ws).status == "finished"
    store = runner.open_store(ws)
    try:
        stored = store.get_run("c")["config"]
        kernel, elsewhere = stored["competitors"]
        assert kernel["name"] == "softmax_triton_ok" and kernel["candidate_id"]
        assert kernel["where"].startswith("evaluated here: passed") and kernel["times_ms"] == {}  # CPU: untimed
        assert store.get_candidate(kernel["candidate_id"]).code == KERNEL.read_text()
        assert elsewhere["times_ms"] == {"bench_4096x4096": 0.5}
        (plan,) = [c for c in store.list_llm_calls("c") if c["call_key"] == "plan:0:0"]
        assert "# Best known competing kernels" in plan["prompt"]
        assert "## softmax_triton_ok (" in plan["prompt"] and KERNEL.read_text().strip()[:200] in plan["prompt"]
        assert "## elsewhere (" in plan["prompt"] and "  bench_4096x4096: it 0.5000 ms" in plan["prompt"]
    finally:
        store.close()
    failing = tmp_path / "wrong.py"
    failing.write_text("def kernel(x):\n    return x\n")
    with pytest.raises(UserError, match="the competing kernel .* does not pass"):
        runner.start_run(config.model_copy(update={"run_id": "d", "compete": [str(failing)]}), workspace=ws)
    with pytest.raises(UserError, match="no such file"):
        runner.start_run(
            config.model_copy(update={"run_id": "e", "compete": [str(tmp_path / "none.py")]}), workspace=ws
        )
