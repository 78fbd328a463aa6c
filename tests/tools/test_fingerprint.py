"""The evaluation key (``DeviceInfo.eval_key``): one assertion per component, so that dropping any one of them (and
reusing a verdict across software versions, devices, task edits or timing methods) fails a test. No subprocess: the
device description is built by hand."""

from __future__ import annotations

import pytest

from ksearch.tasks.softmax import SoftmaxTask
from ksearch.tools import fingerprint
from ksearch.tools.fingerprint import DeviceInfo, task_signature

GPU = DeviceInfo(
    device="cuda:0",
    python="3.11.7",
    torch="2.13.0",
    triton="3.9.0",
    gpu="NVIDIA H100 80GB HBM3",
    sms="132",
    memory_gb="80",
    capability="9.0",
    cuda="13.0",
    l2_mb="50",
)
CPU = DeviceInfo(device="cpu", python="3.11.7", torch="2.13.0", triton="3.9.0")


def test_each_software_and_device_component_is_in_the_key() -> None:
    key = GPU.eval_key("softmax")
    assert key.startswith("softmax|NVIDIA H100 80GB HBM3|")
    assert f"harness={fingerprint.HARNESS_VERSION}" in key
    assert "torch=2.13.0" in key and "triton=3.9.0" in key
    assert GPU.model_copy(update={"torch": "2.13.1"}).eval_key("softmax") != key
    assert GPU.model_copy(update={"triton": "3.9.1"}).eval_key("softmax") != key
    assert GPU.model_copy(update={"gpu": "NVIDIA H200"}).eval_key("softmax") != key
    assert CPU.eval_key("softmax").startswith("softmax|cpu-interpreter|")


def test_the_harness_version_is_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    before = GPU.eval_key("softmax")
    monkeypatch.setattr(fingerprint, "HARNESS_VERSION", "ksearch-evaluator-next")
    assert GPU.eval_key("softmax") != before and "harness=ksearch-evaluator-next" in GPU.eval_key("softmax")


def test_the_task_definition_and_each_config_set_are_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    before = GPU.eval_key("softmax")
    signature = task_signature("softmax", "cuda")
    assert f"definition={signature.definition}|configs={signature.configs}|timing={signature.method}" in before
    assert signature.definition == SoftmaxTask().definition_digest()[:16]

    with monkeypatch.context() as patch:
        patch.setattr(SoftmaxTask, "definition_digest", lambda self: "f" * 64)
        assert GPU.eval_key("softmax") != before and "definition=" + "f" * 16 in GPU.eval_key("softmax")
    for method in ("test_configs", "benchmark_configs"):
        original = getattr(SoftmaxTask, method)
        with monkeypatch.context() as patch:
            patch.setattr(SoftmaxTask, method, lambda self, device, original=original: original(self, device)[:1])
            assert GPU.eval_key("softmax") != before, method
    assert GPU.eval_key("softmax") == before


def test_configs_are_those_of_the_device_kind() -> None:
    cpu, cuda = task_signature("softmax", "cpu"), task_signature("softmax", "cuda")
    assert cpu.configs != cuda.configs and cpu.definition == cuda.definition
    assert f"configs={cpu.configs}" in CPU.eval_key("softmax") and f"configs={cuda.configs}" in GPU.eval_key("softmax")


def test_the_timing_method_is_in_the_key_on_a_gpu_and_untimed_on_the_cpu() -> None:
    assert GPU.eval_key("softmax").endswith("|timing=robust")  # the task's default
    assert GPU.eval_key("softmax", "confirm").endswith("|timing=confirm")
    assert GPU.eval_key("softmax", "confirm") != GPU.eval_key("softmax")
    assert CPU.eval_key("softmax").endswith("|timing=untimed")
    assert CPU.eval_key("softmax", "confirm") == CPU.eval_key("softmax")
    assert task_signature("softmax", "cuda", "confirm").method == "confirm"
    assert task_signature("softmax", "cpu", "confirm").method == "untimed"


def test_the_key_is_stable() -> None:
    assert GPU.eval_key("softmax") == GPU.eval_key("softmax")
    assert (
        len(task_signature("softmax", "cuda").definition) == 16 and len(task_signature("softmax", "cuda").configs) == 16
    )


def test_the_device_description_names_every_property_the_planner_is_shown() -> None:
    text = GPU.describe()
    for part in (
        "NVIDIA H100 80GB HBM3",
        "compute capability 9.0",
        "132 SMs",
        "80 GB memory",
        "50 MB L2",
        "CUDA 13.0",
        "torch 2.13.0",
        "triton 3.9.0",
    ):
        assert part in text
    assert GPU.is_gpu and not CPU.is_gpu
    assert "not timed" in CPU.describe()


def test_a_gpu_is_described_by_its_line_then_the_limits_and_peaks_of_its_own_model() -> None:
    """The limits come from the table entry of the device's own name, not from a target or an empty name."""
    line, limits = GPU.describe().split("\n")
    # the sizes once, on the limits line (the device's own figures where it reports them: issue 57 found 60 MB
    # L2 on one line and 50 MB on the next)
    assert line == "NVIDIA H100 80GB HBM3 (compute capability 9.0), CUDA 13.0, torch 2.13.0, triton 3.9.0"
    assert limits.startswith("Limits and peaks: H100 SXM5 80GB (sm_90): 132 SMs, 80 GB memory at 3.35 TB/s, 50 MB L2.")
    h200 = GPU.model_copy(update={"gpu": "NVIDIA H200", "l2_mb": "60"}).describe()
    assert "60 MB L2" in h200 and "50 MB" not in h200
    assert GPU.describe("b200") == GPU.describe()  # a GPU is described as itself, whatever the target
    unknown = GPU.model_copy(update={"gpu": "Mystery GPU"}).describe()
    assert unknown.startswith("Mystery GPU (compute capability 9.0, 132 SMs, 80 GiB memory, 50 MB L2), CUDA 13.0")
    assert unknown.endswith("triton 3.9.0\nLimits and peaks of this GPU are not known to ksearch.")


def test_the_cpu_is_described_with_the_target_gpu_or_none() -> None:
    aimed = CPU.describe("h100")
    assert "written for the target GPU H100 SXM5 80GB" in aimed and "\nTarget GPU: H100 SXM5 80GB (sm_90)" in aimed
    assert "No GPU is targeted" in CPU.describe() and "Target GPU" not in CPU.describe()


def test_the_target_gpu_is_in_the_key_of_a_cpu_evaluation_only() -> None:
    """On the CPU the verdict depends on the GPU it is compiled for; on a GPU the device's own model is the key."""
    assert CPU.eval_key("softmax", target_gpu="h100") == CPU.eval_key("softmax") + "|target=h100"
    assert CPU.eval_key("softmax", target_gpu="h100") != CPU.eval_key("softmax", target_gpu="h200")
    assert GPU.eval_key("softmax", target_gpu="h100") == GPU.eval_key("softmax")
    assert "target=" not in GPU.eval_key("softmax", "confirm", target_gpu="b200")
