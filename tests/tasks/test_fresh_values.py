"""Which inputs the evaluator may re-randomise in place after a timing loop (``Task.activation_inputs``), for every
task family: a declared position must hold a tensor of the same shape and dtype for any seed, structure (page tables,
indptr, lengths) and parameters are never declared, and for FlashInfer the re-randomised call is a real check.

The cause of issue 38: FlashInfer tasks declared nothing, which meant "every input", so the audit tried to write a
fresh ``sm_scale`` (a Python float) and fresh page tables into a timed input set and crashed every candidate."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from ksearch.tasks.base import InputRole, Task, TaskConfig
from ksearch.tasks.fresh_values import fresh_value_problems, probe_activation_inputs, swappable_positions
from ksearch.tasks.registry import resolve_task

REPO = Path(__file__).resolve().parents[2]
KERNELBENCH = REPO / "tests" / "tasks" / "data" / "kernelbench" / "KernelBench"
FLASHINFER = [
    "flashinfer:gqa_paged_decode_h32_kv4_d128_ps1",
    "flashinfer:mla_paged_decode_h16_ckv512_kpe64_ps1",
    "flashinfer:mla_paged_prefill_causal_h16_ckv512_kpe64_ps1",
    "flashinfer:moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048",
]
STRUCTURE_NAMES = {"kv_indptr", "kv_indices", "qo_indptr"}

needs_fib = pytest.mark.skipif(
    importlib.util.find_spec("flashinfer_bench") is None, reason="flashinfer-bench is not installed"
)
TASKS = [
    "softmax",
    "trimul",
    *(pytest.param(name, marks=needs_fib) for name in FLASHINFER),
    *(f"kernelbench:{path}" for path in sorted(KERNELBENCH.glob("level*/*.py"))),
    str(REPO / "examples" / "my_op.py"),
]


@pytest.fixture(autouse=True)
def _no_dataset_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIB_DATASET_PATH", raising=False)


def _sample(task: Task) -> list:
    """The CPU test and benchmark configs (the same make_inputs code as the GPU's, at sizes the CPU makes quickly)."""
    configs = {c.name: c for c in [*task.test_configs("cpu"), *task.benchmark_configs("cpu")]}
    return list(configs.values())[:6]


@pytest.mark.parametrize("name", TASKS)
def test_declared_activations_take_another_seeds_values_in_place(name: str) -> None:
    task = resolve_task(name)
    for config in _sample(task):
        assert fresh_value_problems(task, config) == []
        roles = task.input_roles(config)
        declared = task.activation_inputs(config)
        if roles is not None:  # a task that names roles declares exactly its activations
            assert declared is not None
            assert all(roles[i] is InputRole.ACTIVATION for i in declared), (config.name, roles, declared)


@needs_fib
@pytest.mark.parametrize("name", FLASHINFER)
def test_flashinfer_declares_its_float_activations_and_never_structure_or_scalars(name: str) -> None:
    task = resolve_task(name)
    names = list(task.definition.inputs)
    for config in task.test_configs("cpu"):
        inputs = task.make_inputs(config, "cpu")
        declared = task.activation_inputs(config)
        assert declared, "every built-in definition has activations to re-randomise"
        assert not {names[i] for i in declared} & STRUCTURE_NAMES
        assert all(isinstance(inputs[i], torch.Tensor) and inputs[i].is_floating_point() for i in declared)
        roles = dict(zip(names, task.input_roles(config), strict=True))
        assert all(roles[n] is InputRole.STRUCTURE for n in STRUCTURE_NAMES & set(names))
        assert all(
            roles[n] is InputRole.PARAMETER
            for n, x in zip(names, inputs, strict=True)
            if not isinstance(x, torch.Tensor)
        )


@needs_fib
@pytest.mark.parametrize("name", FLASHINFER)
def test_flashinfer_re_randomised_call_is_computable_and_a_new_check(name: str) -> None:
    """What the audit does (fresh values copied into the timed set in place) and what the checker rebuilds (the fresh
    values substituted at the same positions) give one valid input set, whose reference differs from the old one."""
    task = resolve_task(name)
    for config in task.test_configs("cpu"):
        timed = task.make_inputs(config, "cpu")
        before = task.expected(config, [x.clone() if isinstance(x, torch.Tensor) else x for x in timed])
        fresh_config = config.model_copy(update={"seed": config.seed + 17})
        fresh = task.make_inputs(fresh_config, "cpu")
        rebuilt = task.make_inputs(config, "cpu")
        for position in task.activation_inputs(config):
            timed[position].copy_(fresh[position])
            rebuilt[position] = fresh[position]
        after = task.expected(config, timed)
        assert all(bool(torch.isfinite(o.float()).all()) for o in after)
        assert all(torch.equal(a, b) for a, b in zip(after, task.expected(config, rebuilt), strict=True))
        assert not torch.equal(after[0], before[0]), f"{config.name}: fresh activations left the output unchanged"
        assert task.check(config, after if task.output_is_tuple else after[0], after) is None


def test_swappable_positions_are_the_tensors_unless_a_size_or_a_scalar_depends_on_the_seed() -> None:
    x, y = torch.zeros(2, 3), torch.ones(2, 3)
    assert swappable_positions([x, 4, "mean"], [y, 4, "mean"]) == (0,)
    assert swappable_positions([x, 4], [y, 5]) == ()  # a seed-dependent length beside fresh values
    assert swappable_positions([x, x], [y, torch.ones(3, 3)]) == ()
    assert swappable_positions([x], [y.double()]) == ()
    assert swappable_positions([x], [y, y]) == ()


def test_kernelbench_and_operator_files_are_probed(tmp_path: Path) -> None:
    varying = tmp_path / "varying.py"
    varying.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x, n):\n        return x[:n] * 2\n\n"
        "def get_inputs():\n    n = int(torch.randint(1, 8, (1,)).item())\n    return [torch.randn(8, 4), n]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    task = resolve_task(f"kernelbench:{varying}")
    config = task.benchmark_configs("cpu")[0]
    inputs = [task.make_inputs(config.model_copy(update={"seed": s}), "cpu")[1] for s in (1, 2, 3, 4)]
    assert len(set(inputs)) > 1, "the length must depend on the seed for this test to mean anything"
    assert task.activation_inputs(config) == ()
    fixed = tmp_path / "fixed.py"
    fixed.write_text(varying.read_text().replace("n = int(torch.randint(1, 8, (1,)).item())", "n = 3"))
    task = resolve_task(f"kernelbench:{fixed}")
    assert task.activation_inputs(task.benchmark_configs("cpu")[0]) == (0,)


def test_the_probe_makes_no_real_tensors_when_the_code_runs_on_meta() -> None:
    devices: list[str] = []

    def make(config, device):  # noqa: ANN001, ANN202
        x = torch.randn(1 << 20, 1 << 20)  # 4 TiB if it were real
        devices.append(str(x.device))
        return [x, int(config.params["n"])]

    assert probe_activation_inputs(make, TaskConfig(name="c", params={"n": 3}, seed=5)) == (0,)
    assert devices == ["meta", "meta"]


@needs_fib
def test_dataset_definitions_get_roles_by_kind_and_inputs_read_from_files_are_not_declared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh seed gives an input read from the dataset's file the same values, so re-randomising it would check
    nothing: only the randomly made activations are declared."""
    import json

    from safetensors.torch import save_file

    from ksearch.tasks.flashinfer import definitions as defs

    assert defs.input_role("rmsnorm_h4096", "weight", "bfloat16", ["hidden_size"]) is InputRole.PARAMETER
    assert (
        defs.input_role("rmsnorm_h4096", "hidden_states", "bfloat16", ["batch", "hidden_size"]) is InputRole.ACTIVATION
    )
    assert defs.input_role("some_paged_op", "indptr", "int32", ["len_indptr"]) is InputRole.STRUCTURE
    assert defs.input_role("rmsnorm_h4096", "eps", "float32", None) is InputRole.PARAMETER

    name = defs.GQA_DECODE
    (tmp_path / "definitions" / "gqa_paged").mkdir(parents=True)
    (tmp_path / "definitions" / "gqa_paged" / f"{name}.json").write_text(defs.builtin_definition_json(name))
    blob = tmp_path / "blob" / "w0.safetensors"
    blob.parent.mkdir()
    save_file(
        {
            "q": torch.randn(2, 32, 128).to(torch.bfloat16),
            "kv_indptr": torch.tensor([0, 2, 5], dtype=torch.int32),
            "kv_indices": torch.tensor([7, 1, 0, 3, 4], dtype=torch.int32),
        },
        blob,
    )
    from_file = {"type": "safetensors", "path": "./blob/w0.safetensors"}
    workload = {
        "definition": name,
        "solution": None,
        "evaluation": None,
        "workload": {
            "uuid": "0123456789ab",
            "axes": {"batch_size": 2, "num_pages": 8, "len_indptr": 3, "num_kv_indices": 5},
            "inputs": {
                "q": {**from_file, "tensor_key": "q"},
                "k_cache": {"type": "random"},
                "v_cache": {"type": "random"},
                "kv_indptr": {**from_file, "tensor_key": "kv_indptr"},
                "kv_indices": {**from_file, "tensor_key": "kv_indices"},
                "sm_scale": {"type": "scalar", "value": 0.0884},
            },
        },
    }
    (tmp_path / "workloads" / "gqa_paged").mkdir(parents=True)
    (tmp_path / "workloads" / "gqa_paged" / f"{name}.jsonl").write_text(json.dumps(workload) + "\n")
    monkeypatch.setenv("FIB_DATASET_PATH", str(tmp_path))
    task = resolve_task(f"flashinfer:{name}")
    config = task.test_configs("cuda")[0]
    assert task.activation_inputs(config) == (1, 2)  # k_cache and v_cache; q comes from the file
    assert fresh_value_problems(task, config) == []
