"""FlashInfer-Bench tasks on the CPU: definitions, synthesis, dataset loading, checking, scoring, Solution JSON, and
the GQA Triton solution under the interpreter. Skips without flashinfer-bench (install line in the skip reason)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ksearch.tasks.flashinfer.definitions import INSTALL_HINT

fib = pytest.importorskip("flashinfer_bench", reason=f"flashinfer-bench is not installed: {INSTALL_HINT}")

from ksearch.contracts.evaluation import Timing, Verdict  # noqa: E402
from ksearch.tasks.flashinfer import definitions as defs  # noqa: E402
from ksearch.tasks.flashinfer.solution import (  # noqa: E402
    candidate_code_from_solution,
    looks_like_solution_json,
    solution_from_json,
    to_solution_json,
)
from ksearch.tasks.flashinfer.solutions import solution_source  # noqa: E402
from ksearch.tasks.flashinfer.task import FlashInferTask, parse_name  # noqa: E402
from ksearch.tasks.flashinfer.workloads import WorkloadSpec, make_workload_inputs  # noqa: E402
from ksearch.tasks.registry import resolve_task  # noqa: E402

DATA = Path(__file__).parent / "data" / "flashinfer"
ALL = list(defs.BUILTIN_DEFINITIONS)


@pytest.fixture(autouse=True)
def _no_dataset_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIB_DATASET_PATH", raising=False)


@pytest.mark.parametrize("name", ALL)
def test_definitions_load_through_flashinfer_bench(name: str, tmp_path: Path) -> None:
    definition = fib.Definition.model_validate_json(defs.builtin_definition_json(name))
    assert definition.name == name
    assert "def run(" in definition.reference
    # ... and through TraceSet.from_path on a dataset layout.
    folder = tmp_path / "definitions" / definition.op_type
    folder.mkdir(parents=True)
    (folder / f"{name}.json").write_text(defs.builtin_definition_json(name))
    assert fib.TraceSet.from_path(str(tmp_path)).definitions[name] == definition


@pytest.mark.parametrize("name", ALL)
def test_synthetic_workloads_are_valid_and_the_reference_is_finite(name: str) -> None:
    task = resolve_task(f"flashinfer:{name}")
    assert isinstance(task, FlashInferTask) and task.name == f"flashinfer:{name}"
    assert "SYNTHETIC" in task.spec("triton")
    cuda = task.test_configs("cuda")
    bench = task.benchmark_configs("cuda")
    assert len(cuda) >= 8 and 4 <= len(bench) <= 5 and {c.name for c in bench} <= {c.name for c in cuda}
    for config in task.test_configs("cpu"):
        inputs = task.make_inputs(config, "cpu")
        named = dict(zip(task.definition.inputs, inputs, strict=True))
        if "kv_indptr" in named:
            indptr, indices = named["kv_indptr"].long(), named["kv_indices"].long()
            kv_len = indptr.diff()
            assert indptr[0] == 0 and indptr[-1] == indices.numel() and bool((kv_len >= 1).all())
            assert (
                indices.unique().numel() == indices.numel()
                and int(indices.max()) < named["ckv_cache" if "ckv_cache" in named else "k_cache"].shape[0]
            )
        if "qo_indptr" in named:
            q_len = named["qo_indptr"].long().diff()
            assert bool((q_len >= 1).all()) and bool((kv_len >= q_len).all())
            assert int(named["qo_indptr"][-1]) == named["q_nope"].shape[0]
        again = task.make_inputs(config, "cpu")
        assert all(
            torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(inputs, again, strict=True)
        )
        outputs = task.expected(config, inputs)
        assert len(outputs) == len(task.definition.outputs)
        assert all(bool(torch.isfinite(o.float()).all()) for o in outputs)
        assert task.check(config, outputs if task.output_is_tuple else outputs[0], outputs) is None


def test_gqa_reference_lse_is_base_2_and_heads_share_kv_by_groups_of_8() -> None:
    task = resolve_task(f"flashinfer:{defs.GQA_DECODE}")
    config = task.test_configs("cpu")[0]
    q, k, v, indptr, indices, scale = task.make_inputs(config, "cpu")
    out, lse = task.expected(config, [q, k, v, indptr, indices, scale])
    pages = indices[: int(indptr[1])].long()
    h = 13  # uses kv head 1
    logits = (k[pages, 0, h // 8].float() @ q[0, h].float()) * scale
    assert lse[0, h].item() == pytest.approx(
        torch.logsumexp(logits, 0).item() / torch.log(torch.tensor(2.0)).item(), rel=1e-5
    )
    ref = torch.softmax(logits, 0) @ v[pages, 0, h // 8].float()
    torch.testing.assert_close(out[0, h].float(), ref, atol=1e-2, rtol=1e-2)


def test_check_follows_flashinfer_bench_tolerances() -> None:
    gqa = resolve_task(f"flashinfer:{defs.GQA_DECODE}")
    config = gqa.test_configs("cpu")[0]
    y = torch.tensor([1000.0, 0.001, 5.0])
    lse = torch.zeros(2)
    ok = y + torch.tensor([5.0, 0.009, 0.04])  # rel ok / abs ok / rel ok
    assert gqa.check(config, (ok, lse), (y, lse)) is None
    bad = y + torch.tensor([0.0, 0.0, 0.06])
    assert "1 of 3 values fail" in gqa.check(config, (bad, lse), (y, lse)).message
    assert "inf/NaN" in gqa.check(config, (y.clone().fill_(float("inf")), lse), (y, lse)).message
    assert "returned 1 outputs" in gqa.check(config, y, (y, lse)).message
    moe = resolve_task(f"flashinfer:{defs.MOE}")
    assert moe.required_matched_ratio == 0.95 and not moe.output_is_tuple
    z = torch.zeros(100)
    assert moe.check(config, z + torch.cat([torch.ones(5), torch.zeros(95)]), (z,)) is None
    assert moe.check(config, z + torch.cat([torch.ones(6), torch.zeros(94)]), (z,)) is not None


def test_score_is_mean_speedup_over_the_baseline(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"configs": {"a": 2.0, "b": 9.0}}))
    task = resolve_task(f"flashinfer:{defs.GQA_DECODE}?baseline={baseline}&search=4")
    assert parse_name(task.name)[2] == {"search": "4", "baseline": str(baseline.resolve())}
    assert len(task.benchmark_configs("cuda")) == 4
    timings = [
        Timing(config="a", median_ms=1.0, mean_ms=1.0, stdev_ms=0.0, samples=1),
        Timing(config="b", median_ms=3.0, mean_ms=3.0, stdev_ms=0.0, samples=1),
    ]
    latency, score = task.score(timings)
    assert score == pytest.approx((2.0 + 3.0) / 2) and latency == pytest.approx(3.0**0.5)
    plain = resolve_task(f"flashinfer:{defs.GQA_DECODE}")
    assert plain.score(timings)[1] == pytest.approx(1 / 3.0**0.5)


def test_dataset_workloads_load_through_trace_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import save_file

    name = defs.GQA_DECODE
    (tmp_path / "definitions" / "gqa_paged").mkdir(parents=True)
    (tmp_path / "definitions" / "gqa_paged" / f"{name}.json").write_text(defs.builtin_definition_json(name))
    blob_dir = tmp_path / "blob" / "workloads" / "gqa_paged" / name
    blob_dir.mkdir(parents=True)
    save_file(
        {
            "kv_indptr": torch.tensor([0, 2, 5], dtype=torch.int32),
            "kv_indices": torch.tensor([7, 1, 0, 3, 4], dtype=torch.int32),
        },
        blob_dir / "w0.safetensors",
    )
    rel = f"./blob/workloads/gqa_paged/{name}/w0.safetensors"
    workload = {
        "definition": name,
        "solution": None,
        "evaluation": None,
        "workload": {
            "uuid": "0123456789ab",
            "axes": {"batch_size": 2, "num_pages": 8, "len_indptr": 3, "num_kv_indices": 5},
            "inputs": {
                "q": {"type": "random"},
                "k_cache": {"type": "random"},
                "v_cache": {"type": "random"},
                "kv_indptr": {"type": "safetensors", "path": rel, "tensor_key": "kv_indptr"},
                "kv_indices": {"type": "safetensors", "path": rel, "tensor_key": "kv_indices"},
                "sm_scale": {"type": "scalar", "value": 0.08838834764831845},
            },
        },
    }
    (tmp_path / "workloads" / "gqa_paged").mkdir(parents=True)
    (tmp_path / "workloads" / "gqa_paged" / f"{name}.jsonl").write_text(json.dumps(workload) + "\n")
    monkeypatch.setenv("FIB_DATASET_PATH", str(tmp_path))
    task = resolve_task(f"flashinfer:{name}")
    assert task.name == f"flashinfer:{name}@{tmp_path.resolve()}" and task.dataset
    assert "from the dataset" in task.spec("triton")
    ((config, spec),) = task.workloads("cuda")
    assert config.name == "w00-01234567" and not spec.synthetic
    inputs = make_workload_inputs(task.definition, spec, config.seed, "cpu")  # tiny: fine on the CPU
    assert (
        inputs[3].tolist() == [0, 2, 5]
        and inputs[4].tolist() == [7, 1, 0, 3, 4]
        and inputs[5] == pytest.approx(0.0884, abs=1e-4)
    )
    out, lse = task.expected(config, inputs)
    assert out.shape == (2, 32, 128) and bool(torch.isfinite(lse).all())
    assert task.test_configs("cpu")  # the interpreter still gets ksearch's tiny synthetic workloads


def test_integer_inputs_are_never_random() -> None:
    definition = defs.load_builtin_definition(defs.GQA_DECODE)
    spec = WorkloadSpec(
        uuid="x",
        axes={"batch_size": 1, "num_pages": 4, "len_indptr": 2, "num_kv_indices": 2},
        scalars={"sm_scale": 0.1},
        synthetic=False,
    )
    with pytest.raises(defs.FlashInferError, match="integer input 'kv_indptr' has no data"):
        make_workload_inputs(definition, spec, 1, "cpu")


def test_solution_json_round_trips_and_converts_back_to_a_candidate() -> None:
    code = solution_source(defs.GQA_DECODE)
    text = to_solution_json(defs.GQA_DECODE, code, "triton", name="ksearch_gqa_triton", description="test")
    assert looks_like_solution_json(text) and not looks_like_solution_json(code)
    solution = solution_from_json(text)
    assert solution == fib.Solution.model_validate(json.loads(text))
    assert solution.spec.entry_point == "main.py::run" and solution.spec.destination_passing_style is False
    assert str(solution.spec.language.value) == "triton" and solution.sources[0].content == code
    back, language = candidate_code_from_solution(text)
    assert back == code and language == "triton"
    cuda = to_solution_json(defs.GQA_DECODE, "from torch.utils.cpp_extension import load_inline\n", "cuda", name="c")
    assert str(solution_from_json(cuda).spec.language.value) == "python"


def test_destination_passing_solution_is_wrapped() -> None:
    definition = defs.load_builtin_definition(defs.GQA_DECODE)
    dps = (
        "import torch\n\n"
        "def attn(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n"
        "    output.fill_(1.0)\n    lse.fill_(2.0)\n"
    )
    solution = fib.Solution(
        name="dps",
        definition=defs.GQA_DECODE,
        author="t",
        spec=fib.BuildSpec(language="python", target_hardware=["cuda"], entry_point="kernel.py::attn"),
        sources=[fib.SourceFile(path="kernel.py", content=dps)],
    )
    code, language = candidate_code_from_solution(solution.model_dump_json(), definition)
    namespace: dict = {}
    exec(compile(code, "candidate", "exec"), namespace)  # noqa: S102 - our own test code
    task = resolve_task(f"flashinfer:{defs.GQA_DECODE}")
    inputs = task.make_inputs(task.test_configs("cpu")[1], "cpu")
    out, lse = namespace["run"](*inputs)
    assert out.shape == (2, 32, 128) and out.dtype == torch.bfloat16 and bool((lse == 2.0).all())
    multi = solution.model_copy(update={"sources": [*solution.sources, fib.SourceFile(path="b.py", content="x = 1\n")]})
    with pytest.raises(defs.FlashInferError, match="2 source files"):
        candidate_code_from_solution(multi.model_dump_json(), definition)


def _evaluate(code: str, definition: str = defs.GQA_DECODE) -> object:
    from ksearch.contracts.candidate import Candidate
    from ksearch.tools.evaluator import EvalRequest, evaluate

    task = f"flashinfer:{definition}"
    return evaluate(
        EvalRequest(candidate=Candidate(task=task, language="triton", code=code, entry_point="run"), device="cpu")
    )


def test_gqa_triton_solution_passes_under_the_interpreter() -> None:
    evaluation = _evaluate(solution_source(defs.GQA_DECODE))
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.configs_passed == evaluation.configs_total == 3


def test_moe_solution_computes_the_reference_bit_for_bit_and_passes_the_evaluator() -> None:
    """The MoE definition had no solution, so its evaluation never ran on a GPU (issue 38): the shipped one is the
    reference's arithmetic with grouped routes, so it must equal the reference exactly, and pass as a candidate."""
    task = resolve_task(f"flashinfer:{defs.MOE}")
    namespace: dict = {}
    exec(compile(solution_source(defs.MOE), "moe_solution", "exec"), namespace)  # noqa: S102 - our own solution
    for config in task.test_configs("cpu"):
        inputs = task.make_inputs(config, "cpu")
        (want,) = task.expected(config, inputs)
        assert torch.equal(namespace["run"](*inputs), want), config.name
    evaluation = _evaluate(solution_source(defs.MOE), defs.MOE)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.configs_passed == evaluation.configs_total == 3


def test_wrong_gqa_solution_is_incorrect() -> None:
    evaluation = _evaluate((DATA / "gqa_decode_wrong_lse.py").read_text())
    assert evaluation.verdict == Verdict.INCORRECT, evaluation.log
    assert "output 'lse'" in evaluation.log


def test_flashinfer_export_format_renders_a_solution() -> None:
    from ksearch.contracts.candidate import Candidate
    from ksearch.flows.export import FORMATS, ExportSource

    task = resolve_task(f"flashinfer:{defs.GQA_DECODE}")
    fmt = FORMATS["flashinfer"]
    assert fmt.unsupported(task) is None and fmt.unsupported(resolve_task("softmax"))
    code = solution_source(defs.GQA_DECODE)
    candidate = Candidate(task=task.name, language="triton", code=code, entry_point="run")
    exported = fmt.render(ExportSource(run={"id": "r1", "model": "m"}, task=task, candidate=candidate, evaluation=None))
    solution = solution_from_json(exported.text)
    assert (
        solution.definition == defs.GQA_DECODE
        and solution.sources[0].content == code
        and exported.filename.endswith(".json")
    )


def test_cuda_gqa_solution_passes_the_static_checks_and_exports() -> None:
    """The load_inline solution is clean for the integrity rules (no false positive on its CUDA source), and its
    Solution JSON is a Python-language solution that converts back to the same candidate."""
    from ksearch.tasks.flashinfer.solutions import solution_languages
    from ksearch.tools import integrity

    assert solution_languages(defs.GQA_DECODE) == ["triton", "cuda"]
    code = solution_source(defs.GQA_DECODE, "cuda")
    assert "load_inline" in code and integrity.check_source(code, task_name=f"flashinfer:{defs.GQA_DECODE}") is None
    text = to_solution_json(defs.GQA_DECODE, code, "cuda", name="ksearch_gqa_cuda")
    assert str(solution_from_json(text).spec.language.value) == "python"
    assert candidate_code_from_solution(text) == (code, "cuda")


def test_exported_solution_is_accepted_and_run_by_flashinfer_bench_itself(tmp_path: Path) -> None:
    """`ksearch export --format flashinfer` output, dropped into a flashinfer-trace layout: flashinfer-bench's TraceSet
    loads it under its definition and its own BuilderRegistry (what its Benchmark runners build solutions with) builds
    it into a runnable whose outputs match our reference (Triton interpreter, CPU; Benchmark itself needs a GPU)."""
    from ksearch.contracts.candidate import Candidate
    from ksearch.flows.export import FORMATS, ExportSource

    task = resolve_task(f"flashinfer:{defs.GQA_DECODE}")
    code = solution_source(defs.GQA_DECODE)
    candidate = Candidate(task=task.name, language="triton", code=code, entry_point="run")
    exported = FORMATS["flashinfer"].render(
        ExportSource(run={"id": "r1", "model": "m"}, task=task, candidate=candidate, evaluation=None)
    )
    definition = defs.load_builtin_definition(defs.GQA_DECODE)
    (tmp_path / "definitions" / definition.op_type).mkdir(parents=True)
    (tmp_path / "definitions" / definition.op_type / f"{defs.GQA_DECODE}.json").write_text(
        defs.builtin_definition_json(defs.GQA_DECODE)
    )
    (tmp_path / "solutions" / definition.op_type / defs.GQA_DECODE).mkdir(parents=True)
    (tmp_path / "solutions" / definition.op_type / defs.GQA_DECODE / exported.filename).write_text(exported.text)
    trace_set = fib.TraceSet.from_path(str(tmp_path))
    [solution] = trace_set.solutions[defs.GQA_DECODE]
    assert solution.sources[0].content == code

    from flashinfer_bench.compile import BuilderRegistry

    runnable = BuilderRegistry.get_instance().build(trace_set.definitions[defs.GQA_DECODE], solution)
    config = task.test_configs("cpu")[1]
    inputs = task.make_inputs(config, "cpu")
    out, lse = runnable(*inputs)
    want_out, want_lse = task.expected(config, inputs)
    torch.testing.assert_close(out.float(), want_out.float(), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-2, rtol=1e-2)
