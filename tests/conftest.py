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


def pytest_collection_modifyitems(config, items):
    if _HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path, monkeypatch):
    """Every test gets its own workspace and cannot reach a real LLM provider by accident."""
    monkeypatch.setenv("KSEARCH_WORKSPACE", str(tmp_path / "workspace"))
    monkeypatch.setenv("KSEARCH_TRUST_FILE", str(tmp_path / "trusted-runs.json"))  # what the user vouched for
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "MISTRAL_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    yield
