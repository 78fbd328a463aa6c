"""Shared test set-up: temp workspaces, no real model requests, GPU tests skipped without CUDA."""

from __future__ import annotations

import os

import pytest

from ksearch.redaction import SECRET_NAME

# Kernels run under Triton's interpreter on machines without a GPU; set before anything imports triton.
try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # torch missing or broken: GPU tests cannot run either
    _HAS_CUDA = False

if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# A process whose environment holds a secret-named variable (HF_TOKEN on a GPU node, say) never imports a task file:
# it loads one in a process without the key (``ksearch.tasks.keyless``). Tests that build a task file's task directly
# need to import it here, so the suite runs without any; a test that needs a key sets one itself.
for _name in [name for name in os.environ if SECRET_NAME.search(name)]:
    del os.environ[_name]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.serial)  # a kernel timed beside another test's work is rejected or stopped
            if not _HAS_CUDA:
                item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _isolated_environment(request, tmp_path, monkeypatch):
    """Every test gets its own workspace and cannot reach a real LLM provider by accident. A test that switched the
    CPU's timing on (``KSEARCH_CPU_TIMING``) must be marked ``serial``: the first pass of the test command runs
    tests side by side, and a kernel timed beside another test's work is judged on a busy machine."""
    from ksearch import settings

    monkeypatch.setenv(settings.WORKSPACE.name, str(tmp_path / "workspace"))
    monkeypatch.setenv(settings.TRUST_FILE.name, str(tmp_path / "trusted-runs.json"))  # what the user vouched for
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "MISTRAL_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv(settings.CPU_TIMING.name, raising=False)
    yield
    if settings.CPU_TIMING.is_on() and request.node.get_closest_marker("serial") is None:
        pytest.fail(f"{request.node.nodeid} times kernels on the CPU: mark it @pytest.mark.serial", pytrace=False)


@pytest.fixture(scope="module")
def cpu_session():
    """One evaluator session on the CPU for a module's untimed evaluations: its trusted checker starts once instead
    of once per evaluation (each evaluation still gets a fresh worker, as in a run). Timed evaluations keep their own
    session: a worker the session starts ahead of need would run beside the timed calls."""
    from ksearch.tools.evaluator import EvaluatorSession

    with EvaluatorSession("cpu") as session:
        yield session


@pytest.fixture
def in_process_executor(monkeypatch):
    """Runs made in this test evaluate in the test's own process (``tests/helpers/in_process_executor.py``): for
    graph, CLI and flow tests that do not test the evaluator. Opt in with ``pytest.mark.usefixtures``."""
    from ksearch.flows import services
    from ksearch.flows import skills as skills_flow
    from tests.helpers.in_process_executor import InProcessExecutor

    executor = InProcessExecutor()
    monkeypatch.setattr(services, "open_executor", lambda config: executor)
    monkeypatch.setattr(skills_flow, "LocalExecutor", lambda: executor)
    return executor


@pytest.fixture
def fake_executor(monkeypatch):
    """Runs made in this test evaluate with ``tests/fakes.FakeExecutor`` (verdicts from a table, markers or the
    shared kernels; no candidate code runs): for graph, CLI and flow tests that do not test the evaluator (its
    docstring says when to use which executor). Add verdicts with ``fake_executor.table[line] = Verdict...``."""
    from tests.fakes import FakeExecutor, install

    executor = FakeExecutor()
    install(executor, monkeypatch.setattr)
    return executor
