"""GPU MODE's ``task`` and ``utils`` modules as ksearch provides them to TriMul candidates."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from ksearch.tasks.registry import resolve_task


@pytest.fixture(scope="module")
def support(tmp_path_factory: pytest.TempPathFactory):
    """The modules exactly as a candidate imports them: written from ``support_modules`` and imported by name."""
    folder = tmp_path_factory.mktemp("support")
    modules = resolve_task("trimul").support_modules()
    assert set(modules) == {"task", "utils"}
    loaded = {}
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"gpumode_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded[name] = module
    return loaded


def test_the_template_header_imports(support) -> None:
    task = support["task"]
    assert task.output_t is torch.Tensor
    spec = task.TestSpec(seqlen=32, bs=1, dim=128, hiddendim=128, seed=1, nomask=True, distribution="normal")
    assert spec["seqlen"] == 32


def test_disable_cudnn_tf32_restores_the_callers_settings(support) -> None:
    before = torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic
    with support["utils"].DisableCuDNNTF32():
        assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cudnn.deterministic is True
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic) == before


def test_verbose_allclose_and_match_reference(support) -> None:
    utils = support["utils"]
    a = torch.tensor([1.0, 2.0, float("nan"), float("inf")])
    assert utils.verbose_allclose(a.clone(), a, rtol=0, atol=0) == (True, [])
    good, lines = utils.verbose_allclose(torch.tensor([1.0, 2.5, float("nan"), float("inf")]), a, rtol=0.01, atol=0.01)
    assert not good and lines[0] == "Number of mismatched elements: 1" and "(1,)" in lines[1]
    assert utils.verbose_allclose(torch.zeros(2), torch.zeros(3)) == (False, ["SIZE MISMATCH"])
    assert not utils.verbose_allclose(torch.tensor([float("-inf")]), torch.tensor([float("inf")]))[0]
    assert utils.verbose_allequal(torch.arange(3), torch.arange(3)) == (True, [])
    check = utils.make_match_reference(lambda data: data * 2, rtol=1e-3, atol=1e-3)
    assert check(torch.ones(4), torch.full((4,), 2.0)) == (True, "")
    ok, message = check(torch.ones(4), torch.ones(4))
    assert not ok and "mismatch" in message


def test_set_seed_and_get_device(support) -> None:
    utils = support["utils"]
    utils.set_seed(7)
    first = torch.rand(3)
    utils.set_seed(7)
    assert torch.equal(first, torch.rand(3))
    assert utils.get_device(use_cuda=False) == torch.device("cpu")
