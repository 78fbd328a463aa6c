"""The built wheel holds every file of the package, and an installed wheel works on its own: `ksearch tasks` (its
hints naming installed files), `ksearch demo` (its replies ship in the wheel) and a FlashInfer-Bench evaluation run
from a fresh environment in a folder that is not the checkout.

Issue 38: the wheel left out the FlashInfer definitions (JSON) and userop/PROTOCOL.md, so a wheel install (how
scripts/build_wheelhouse.sh installs offline GPU nodes) ended `ksearch tasks` in a FileNotFoundError; the editable
install of the README hid it. The fresh environment gets the wheel with --no-deps and sees the running interpreter's
site-packages through a path file (the dependencies, never a second ksearch: the editable install's hook is a path
file of that folder, which Python does not run for a folder added this way), so the test needs no network.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ksearch"
GQA = "gqa_paged_decode_h32_kv4_d128_ps1"


def _package_files() -> set[str]:
    """Every file of the source package, as wheel paths (caches and compiled files aside)."""
    return {
        path.relative_to(REPO).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the package and its metadata (a stale build/ of the checkout cannot leak in)."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.fail("setuptools is needed to build the wheel offline: pip install -e '.[test]'")
    source = tmp_path_factory.mktemp("source")
    shutil.copytree(PACKAGE, source / "ksearch", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("ksearch-*.whl")
    return built


def test_wheel_ships_every_file_of_the_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    missing = sorted(_package_files() - shipped)
    assert missing == [], f"add these to [tool.setuptools.package-data] in pyproject.toml: {missing}"
    assert f"ksearch/tasks/flashinfer/definitions/{GQA}.json" in shipped  # the files of issue 38, by name
    assert "ksearch/tasks/userop/PROTOCOL.md" in shipped


@pytest.mark.slow
def test_installed_wheel_lists_tasks_runs_the_demo_and_a_flashinfer_task(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    ours = {sysconfig.get_path("purelib"), *site.getsitepackages()}
    (purelib / "outer-site-packages.pth").write_text("".join(f"{d}\n" for d in sorted(ours) if Path(d).is_dir()))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            str(wheel),
        ],
        check=True,
        timeout=300,
    )

    work = tmp_path / "elsewhere"  # not the checkout: its ksearch/ must not be importable from the current folder
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        KSEARCH_WORKSPACE=str(tmp_path / "workspace"),
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS="200",
    )
    env.pop("FIB_DATASET_PATH", None)

    def ksearch(*args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [str(venv / "bin" / "ksearch"), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"ksearch {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    where = subprocess.run(
        [str(python), "-c", "import ksearch; print(ksearch.__file__)"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(purelib), f"ksearch came from {where}, not the installed wheel"

    listing = ksearch("tasks")
    for name in ("softmax", "trimul", *(f"flashinfer:{d}" for d in _builtin_definitions())):
        assert name in listing, listing

    assert f"see {purelib / 'ksearch' / 'tasks' / 'userop' / 'PROTOCOL.md'}" in listing  # installed, not a repo path

    demo = ksearch("demo", timeout=600)  # the replies ship in the wheel: no checkout, any folder
    assert "best kernel" in demo and "passed" in demo, demo
    assert "finished: round budget spent (6/6)" in demo, demo
    readme = subprocess.run(  # the README's long form, typed where no checkout is: the hint names the command
        [str(venv / "bin" / "ksearch"), "run", "softmax", "--model", "replay:examples/softmax-demo.jsonl"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert readme.returncode == 1 and "run `ksearch demo`" in readme.stderr, readme.stderr

    if importlib.util.find_spec("flashinfer_bench") is None:
        pytest.skip("flashinfer-bench is not installed: the FlashInfer evaluation from the wheel cannot run")
    solution = purelib / "ksearch" / "tasks" / "flashinfer" / "solutions" / "gqa_paged_decode_triton.py"
    evaluation = ksearch("eval", f"flashinfer:{GQA}", str(solution), "--device", "cpu")
    assert "passed 3/3" in evaluation, evaluation


def _builtin_definitions() -> list[str]:
    return sorted(p.stem for p in (PACKAGE / "tasks" / "flashinfer" / "definitions").glob("*.json"))
