"""Deny by object (issue 59): the reach rule judges what a chain of attributes lands on in the installed modules, so
a public attribute of an allowed module that holds the interpreter's machinery is refused under any name.

``test_every_gateway_the_installed_libraries_publish_is_refused`` regenerates the table (``walk_gateways``) against
the torch, Triton and NumPy installed where it runs and scans an access to each entry: a gateway a new release adds
is refused, and if one ever is not, this test names it."""

from __future__ import annotations

import pytest

from ksearch.tools.integrity import scan
from ksearch.tools.integrity.gateways import ROOT_ONLY, landing, walk_gateways
from ksearch.tools.integrity.reach_lists import ALLOWED_IMPORTS, RESTRICTED_STEPS, candidate_may_import

ROOTS = tuple(name for name in ALLOWED_IMPORTS if name != "__future__")


def _rules(code: str) -> set[str]:
    return {finding.rule for finding in scan(code, task_name="softmax")}


@pytest.fixture(scope="module")
def table() -> dict[str, str]:
    return {gateway.path: gateway.kind for gateway in walk_gateways(ROOTS, candidate_may_import, RESTRICTED_STEPS)}


def test_the_table_is_generated_from_what_the_attributes_hold(table: dict[str, str]) -> None:
    """The gateways a red-team review found under names no rule knew are in the walked table, by what they hold."""
    assert table["enum.bltns"] == "the builtins module"
    assert table["triton.language.extra.modules"] == "the module table (sys.modules)"
    assert table["torch.cuda.tunable.mp"] == "the module multiprocessing"
    assert all(not path.split(".")[-1].startswith("_") for path in table)


def test_every_gateway_the_installed_libraries_publish_is_refused(table: dict[str, str]) -> None:
    missed = []
    for path in sorted(table):
        root, rest = path.split(".", 1)
        code = f"import {root}\n\nheld = {root}.{rest}\n"
        if "interpreter_reach" not in _rules(code):
            missed.append(f"{path} ({table[path]})")
    assert not missed, f"{len(missed)} of {len(table)} gateways are not refused: {missed[:20]}"


@pytest.mark.parametrize(
    "code",
    [
        "import enum\nb = enum.bltns\n",
        "from enum import bltns\n\nf = bltns.open\n",
        "import enum as e\nx = getattr(e, 'bltns')\n",
        "from triton.language.extra import modules\n\nm = modules['sys']\n",
        "import triton.language.extra as extra\nm = extra.modules['sys']\n",
        "import triton.language as tl\nm = tl.extra.modules\n",
        "import torch\nm = torch.cuda.tunable.mp.get_context('fork')\n",
        "from torch.cuda import tunable\np = tunable.mp.Process\n",
        "import torch\nfutures = torch.cuda.tunable.concurrent\n",
        "import dataclasses\nr = dataclasses.re\n",
        "import logging\np = logging.os\n",
        "import torch\nd = torch.distributed\n",
    ],
)
def test_a_chain_that_lands_on_a_gateway_is_refused(code: str) -> None:
    assert "interpreter_reach" in _rules(code)


@pytest.mark.parametrize(
    "code",
    [
        "import os\np = os.path.join('a', 'b')\n",
        "import sys\nsys.stderr.write('x')\n",
        "import torch\ntorch._inductor.config.max_autotune = True\n",
        "import torch\ny = torch.nn.functional.softmax\n",
        "import torch\nv = torch.__version__\n",
        "import numpy as np\nn = np.linalg.norm\n",
        "import triton.language as tl\nf = tl.extra.libdevice\n",
        "import threading\nlock = threading.Lock()\n",
        "import torch\np = torch.cuda.get_device_properties\n",
        "import torch\nbackend = torch.backends.cuda.matmul\n",
    ],
)
def test_honest_chains_pass(code: str) -> None:
    assert "interpreter_reach" not in _rules(code)
    import torch._inductor.config  # noqa: F401 - the same once the scanning process has imported torch's own modules

    assert "interpreter_reach" not in _rules(code)


def test_the_modules_a_kernel_imports_by_name_only_are_gateways_as_attributes() -> None:
    for name in ROOT_ONLY:
        found = landing("logging", [name], candidate_may_import) or landing("torch", [name], candidate_may_import)
        assert found is not None and name in found.kind


def test_a_chain_the_installed_modules_cannot_follow_is_left_to_the_name_rules() -> None:
    assert landing("torch", ["no_such_attribute", "mp"], candidate_may_import) is None
    assert landing("no_such_module_anywhere", ["x"], candidate_may_import) is None


def test_what_counts_as_a_gateway_by_object(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """Import loaders and module specs (they load and run modules), frames and code objects, and builtins found by
    identity; plain values are not gateways."""
    import builtins
    import importlib.machinery
    import sys

    from ksearch.tools.integrity.gateways import gateway_kind

    spec = importlib.machinery.ModuleSpec("anything", None)
    loader = importlib.machinery.SourceFileLoader("anything", str(tmp_path / "anything.py"))
    assert gateway_kind(spec, candidate_may_import) == "an import loader"
    assert gateway_kind(loader, candidate_may_import) == "an import loader"
    assert gateway_kind(importlib.machinery.SourceFileLoader, candidate_may_import) == "an import loader"
    assert gateway_kind(sys._getframe(), candidate_may_import) == "a frame"
    assert gateway_kind(builtins, candidate_may_import) == "the builtins module"
    assert gateway_kind(builtins.getattr, candidate_may_import) == "the builtin getattr"
    for value in (42, "os", [sys], type, int, candidate_may_import):
        assert gateway_kind(value, candidate_may_import) is None

    class Evasive:
        """Its class cannot be asked: judged by its type, never by what it says it is."""

        @property
        def __class__(self):  # noqa: ANN204
            raise RuntimeError("no")

    assert gateway_kind(Evasive(), candidate_may_import) is None


def test_a_chain_is_followed_through_classes_and_submodules_not_imported_yet(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """A class of an allowed module holding a module is followed like a module; a submodule the scanning process
    has not imported is imported (as the kernel's chain would) and judged by what it holds, and so is one imported
    but not bound in its package."""
    import importlib
    import sys

    package = tmp_path / "fakekernelpkg"
    package.mkdir()
    (package / "__init__.py").write_text("import os as _os\n\nclass Holder:\n    tools = _os\n", encoding="utf-8")
    (package / "lazy.py").write_text("import subprocess as runner\n", encoding="utf-8")
    (package / "hidden.py").write_text("import subprocess as runner\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))

    def allowed(name: str) -> bool:
        return name.split(".")[0] == "fakekernelpkg"

    through_class = landing("fakekernelpkg", ["Holder", "tools"], allowed)
    assert through_class is not None and through_class.kind.startswith("the module os")
    through_submodule = landing("fakekernelpkg", ["lazy", "runner"], allowed)
    assert through_submodule is not None and through_submodule.kind == "the module subprocess"
    assert landing("fakekernelpkg", ["missing", "runner"], allowed) is None
    importlib.import_module("fakekernelpkg.hidden")  # imported, then unbound from its package
    del sys.modules["fakekernelpkg"].hidden
    through_table = landing("fakekernelpkg", ["hidden", "runner"], allowed)
    assert through_table is not None and through_table.kind == "the module subprocess"
