"""Kernels that go after the API key (``exploits/secret_*.py``), through the real CLI and evaluator.

The key is in the initial environment of the agent process (as ``export OPENAI_API_KEY=...`` puts it there), so
``/proc/AGENT/environ`` holds it whatever the agent does to ``os.environ``. Each exploit reports what it got as a
``LOOT-REPORT`` line in the exception it raises, so the log carries it into the verdict, the store and the next prompt.
Assertions: the exploit ran (its report is in the log), got nothing (``found=0``), and the key is nowhere; with
containment off the same exploit does get the key (so the exploit is real), and the redaction still keeps it out.

The static rules refuse these files before they run (``pathlib``, ``open`` and ``os`` beyond build variables are off
a kernel's allow-list), so the tests switch them off: this is the layer behind them, which must hold for code that
reaches a file through a C++ extension, say.
"""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.tools.containment import policy
from ksearch.tools.containment.landlock_rules import readable_roots

REPO = Path(__file__).resolve().parents[2]
CLI_WITHOUT_STATIC_RULES = [
    sys.executable,
    "-c",
    "import sys, ksearch.tools.integrity as rules; rules.check_source = lambda code, **kwargs: None; "
    "from ksearch.cli import main; sys.argv[0] = 'ksearch'; main()",
]
"""``ksearch`` with the static rules switched off, in a process of its own (the CLI's subprocess)."""
EXPLOITS = Path(__file__).resolve().parent / "exploits"
SECRET = "sk-ksearchtest-" + "7f3a9c1e5b2d4f608a1c3e5f7a9b0d2c"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment is Linux's")


def _env(sandbox: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSEARCH_")}
    # The repository first; an offline GPU node's wheelhouse folder (scripts/gpu_checks.sh) stays on the path.
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env.update(OPENAI_API_KEY=SECRET, KSEARCH_SANDBOX=sandbox, PYTHONPATH=path)
    return env


def _eval(exploit: Path, sandbox: str, device: str = "cpu") -> dict:
    done = subprocess.run(
        [*CLI_WITHOUT_STATIC_RULES, "eval", "softmax", str(exploit), "--device", device, "--json"],
        cwd=REPO,
        env=_env(sandbox),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert SECRET not in done.stdout + done.stderr
    assert done.stdout.strip(), f"ksearch eval printed no report (exit {done.returncode}): {done.stderr[-3000:]}"
    report = json.loads(done.stdout)
    return report.get("evaluation", report)


def _loot(evaluation: dict) -> str:
    lines = [line for line in evaluation["log"].splitlines() if "LOOT-REPORT" in line]
    assert lines, f"the exploit did not report (it must run to its end): {evaluation['log'][:800]}"
    return lines[0]


def _available() -> tuple[str, ...]:
    return policy.probe(gpu=False)[0]


@linux_only
@pytest.mark.parametrize("name", ["secret_ancestor_environ.py", "secret_proc_cmdline.py", "secret_parent_fds.py"])
def test_exploit_gets_no_key_with_the_default_containment(name: str) -> None:
    evaluation = _eval(EXPLOITS / name, "auto")
    loot = _loot(evaluation)
    assert "found=0" in loot, loot
    if name == "secret_parent_fds.py":
        assert "opened=0" in loot, loot
    active = evaluation["environment"]["sandbox"].split(",")
    assert set(_available()) <= set(active) and "nondumpable" in active


@linux_only
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["secret_ancestor_environ.py", "secret_parent_fds.py", "secret_proc_cmdline.py"])
def test_exploit_gets_no_key_on_a_gpu(name: str) -> None:
    """On a GPU the PID namespace (CUDA IPC) is off: the other layers, Landlock among them, must hold, and CUDA IPC
    must still work (the staging buffer stays on the device). Other processes' command lines are visible there; none
    holds the key."""
    evaluation = _eval(EXPLOITS / name, "auto", "cuda")
    assert "found=0" in _loot(evaluation)
    environment = evaluation["environment"]
    assert "pidns" not in environment["sandbox"] and "landlock" in environment["sandbox"]
    assert "nondumpable" in environment["sandbox"] and environment.get("staging") == "cuda_ipc"
    assert set(policy.probe(gpu=True)[0]) <= set(environment["sandbox"].split(","))


@linux_only
@pytest.mark.parametrize("layers", ["userns,caps,landlock", "userns", "caps", "landlock"])
def test_each_layer_alone_keeps_the_ancestors_environment_away(layers: str) -> None:
    """Every layer the GPU default uses (no PID namespace there) holds on its own, where this machine has it."""
    if not set(layers.split(",")) <= set(_available()):
        pytest.skip(f"this machine refuses part of {layers}: {policy.probe(gpu=False)[1]}")
    if layers == "caps" and os.geteuid() != 0:
        pytest.skip("dropping capabilities protects only a root agent; an ordinary user has none to drop")
    evaluation = _eval(EXPLOITS / "secret_ancestor_environ.py", layers)
    assert "found=0" in _loot(evaluation)
    assert evaluation["environment"]["sandbox"].startswith(layers)


@linux_only
def test_without_containment_the_exploit_gets_the_key_and_redaction_still_scrubs_it() -> None:
    """The control: the exploit is real (today's evaluator handed it the key), and the second line holds."""
    evaluation = _eval(EXPLOITS / "secret_ancestor_environ.py", "off")
    loot = _loot(evaluation)
    assert "found=0" not in loot and "[redacted]" in loot
    assert evaluation["environment"]["sandbox"] == "none"


@linux_only
@pytest.mark.parametrize("sandbox", ["auto", "off", "userns,mountns,caps"])
def test_the_workspace_database_is_hidden_from_kernels(
    tmp_path: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Landlock hides it where the machine has it; the mount layer covers it where it has not (a GPU's layers)."""
    from ksearch.tools.evaluator import EvalRequest, evaluate

    if sandbox == "auto" and "landlock" not in _available():
        pytest.skip(f"no Landlock here: {policy.probe(gpu=False)[1]}")
    if sandbox.startswith("userns") and not set(sandbox.split(",")) <= set(_available()):
        pytest.skip(f"this machine refuses part of {sandbox}: {policy.probe(gpu=False)[1]}")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    database = workspace / "ksearch.db"
    database.write_text(f"settings {SECRET} prompts kernels\n")
    monkeypatch.setenv("KSEARCH_SANDBOX", sandbox)
    monkeypatch.setattr(policy, "_hidden", [])
    monkeypatch.setattr(
        importlib.import_module("ksearch.tools.evaluator.parent.evaluate").integrity,
        "check_source",
        lambda code, **kwargs: None,
    )
    policy.hide(workspace)
    code = (EXPLOITS / "secret_workspace_db.py").read_text().replace("__WORKSPACE_DB__", str(database))
    candidate = Candidate(code=code, task="softmax", language="triton", entry_point="kernel")
    evaluation = evaluate(EvalRequest(candidate=candidate, device="cpu"))
    loot = [line for line in evaluation.log.splitlines() if "LOOT-REPORT" in line][0]
    assert SECRET not in evaluation.model_dump_json()
    if sandbox != "off":
        assert "read=0 denied=1" in loot or "read=1 denied=0 found=0" in loot, loot  # closed, or covered (empty)
    else:
        assert "read=1" in loot and "[redacted]" in loot


@linux_only
def test_a_run_keeps_the_key_out_of_the_store_and_the_next_prompt(tmp_path: Path) -> None:
    """A search whose first kernel is the exploit: the verdict, every stored row and the debug prompt that shows the
    model the failure carry the exploit's report but never the key."""
    demo = [
        line for line in (REPO / "examples" / "softmax-demo.jsonl").read_text().splitlines() if line.startswith("{")
    ]
    replies = [json.loads(line) for line in demo]
    exploit = (EXPLOITS / "secret_ancestor_environ.py").read_text()
    replies = [replies[0], {"call_key": "write:c1:1", "reply": f"```python\n{exploit}\n```"}, replies[2]]
    script = tmp_path / "replies.jsonl"
    script.write_text("\n".join(json.dumps(r) for r in replies) + "\n")
    workspace = tmp_path / "ws"
    env = _env("off")  # the weakest setting: the key reaches the kernel, and must still go no further
    subprocess.run(
        [
            *CLI_WITHOUT_STATIC_RULES,
            "--workspace",
            str(workspace),
            "run",
            "softmax",
            "--model",
            f"replay:{script}",
            "--device",
            "cpu",
            "--max-rounds",
            "2",
            "--run-id",
            "leak",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    with sqlite3.connect(workspace / "ksearch.db") as conn:
        dump = "\n".join(conn.iterdump())
        prompts = [row[0] for row in conn.execute("select prompt from llm_calls where call_key = 'write:c1:2'")]
        verdicts = [row[0] for row in conn.execute("select verdict from evaluations")]
    assert "runtime_error" in verdicts
    assert "LOOT-REPORT" in dump and SECRET not in dump
    assert prompts and "LOOT-REPORT" in prompts[0] and "[redacted]" in prompts[0] and SECRET not in prompts[0]


def test_readable_roots_allow_everything_but_the_hidden_paths() -> None:
    tree = {"/": ["home", "usr", "tmp"], "/home": ["me", "you"], "/home/me": [".ssh", "proj", "link"]}
    roots, listed = readable_roots(["/home/me/.ssh"], listdir=lambda p: tree[p], is_link=lambda p: p.endswith("link"))
    assert roots == ["/home/me/proj", "/home/you", "/tmp", "/usr"]
    assert listed == ["/", "/home", "/home/me"]
    assert readable_roots([]) == (["/"], [])


def test_unknown_layers_are_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSEARCH_SANDBOX", "userns,chroot")
    with pytest.raises(policy.SandboxError, match="chroot"):
        policy.requested()


@pytest.mark.parametrize(
    ("value", "agent_layers"),
    [
        ("auto", ("nondumpable",)),
        ("off", ()),
        ("userns,mountns,netns,caps,nondumpable", ("nondumpable",)),
        ("userns,mountns,netns,caps", ()),
    ],
)
def test_a_list_protects_the_agent_only_when_it_names_nondumpable(
    value: str, agent_layers: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stricter example in docs/security.md names ``nondumpable``: a list gives exactly its layers, the agent's
    included."""
    monkeypatch.setenv("KSEARCH_SANDBOX", value)
    assert policy.parent_layers() == agent_layers


def test_hidden_paths_never_hide_what_the_worker_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy, "_hidden", [])
    policy.hide(REPO)  # holds ksearch itself: hiding it would break every worker
    policy.hide(tmp_path)
    hidden = policy.hidden_paths(keep=[])
    assert str(REPO.resolve()) not in hidden and os.path.realpath(tmp_path) in hidden
    assert str(REPO.resolve()) in policy.exposed_paths()  # and the evaluation's record says it could not be hidden
    assert str(REPO.resolve()) in policy.record("cpu")["sandbox_missing"] or not policy.child_layers("cpu")
