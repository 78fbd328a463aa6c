"""A task file is never imported into a process that holds an API key (issue 61): there it is loaded in a process
without the key, and what the agent and the evaluator's parent read of it is its description, the same as the task's
own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ksearch.tasks import keyless
from ksearch.tasks._loading import KeyHeldError, ProblemFormatError
from ksearch.tasks.registry import prepare_task, resolve_task
from ksearch.tasks.userop import UserOpTask

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "my_op.py"
KEY = "sk-ksearchtest-" + "9c1e5b2d4f608a1c3e5f7a9b0d2c7f3a"


def test_under_a_key_the_task_is_its_description(monkeypatch: pytest.MonkeyPatch) -> None:
    real = UserOpTask(EXAMPLE)  # no key in this environment yet: imported here
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(KeyHeldError, match="not imported into a process that holds an API key"):
        UserOpTask(EXAMPLE)
    monkeypatch.chdir(REPO)
    described = resolve_task("examples/my_op.py")  # a relative name, as the user typed it
    assert isinstance(described, keyless.DescribedTask)
    assert (described.name, described.title, described.entry_point) == (real.name, real.title, real.entry_point)
    assert described.definition_digest() == real.definition_digest()
    assert described.spec("triton") == real.spec("triton") and described.reference_source() == real.source
    for device in ("cpu", "cuda:0"):
        assert described.test_configs(device) == real.test_configs(device)
        assert described.benchmark_configs(device) == real.benchmark_configs(device)
    config = real.benchmark_configs("cuda")[0]
    assert described.flops_and_bytes(config) == real.flops_and_bytes(config)
    assert described.data_paths() == (str(EXAMPLE),)
    with pytest.raises(keyless.NotLoadedHere):
        described.make_inputs(config, "cpu")


def test_a_task_file_is_validated_without_the_key_and_its_errors_are_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader validates the file (its reference runs there) and its error comes back as the same class, with the
    same message; the loader saw no key and ran in another process."""
    marker = tmp_path / "seen"
    noisy = tmp_path / "noisy.py"
    noisy.write_text(
        "import os, torch\n"
        f"open({str(marker)!r}, 'a').write(f\"{{os.getpid()}} {{'OPENAI_API_KEY' in os.environ}}\\n\")\n"
        'CONFIGS = [{"n": 8}]\n'
        "def make_inputs(config, seed, device):\n"
        "    return [torch.ones(config['n'], device=device)]\n"
        "def reference(x):\n"
        "    return x * 2 + torch.rand(1)\n"
    )
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(ProblemFormatError, match="reference is not deterministic"):
        prepare_task(str(noisy))
    pid, seen_key = marker.read_text().split()
    assert int(pid) != os.getpid() and seen_key == "False"
