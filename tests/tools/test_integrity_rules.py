"""The library and process rules at their edges, each case one decision of ``integrity/library.py`` or
``integrity/processes.py`` that no other test pinned (found by ``bench/mutation.py``): what a self-test is, which
calls in an ``except`` handler are a fallback, which uses of ``threading`` are locks only, when ``vars()`` reads the
harness, and which imports count as used."""

from __future__ import annotations

import ast

import pytest

from ksearch.tools.integrity import scan
from ksearch.tools.integrity.scanner import Scanner

JIT = "import triton\nimport triton.language as tl\n"
MAIN_SOFTMAX = "    print(torch.softmax(torch.ones(3), 0))\n"


def rules(code: str, task: str | None = "softmax") -> set[str]:
    return {finding.rule for finding in scan(code, task_name=task)}


@pytest.mark.parametrize(
    ("code", "rule", "present"),
    [
        # a self-test: only ``if __name__ == "__main__":`` at the top level, and only when the module does not bind
        # ``__name__`` itself
        ("import torch\nif __name__ == '__main__':\n" + MAIN_SOFTMAX, "forbidden_op", False),
        ("import torch\nif '__main__' == __name__:\n" + MAIN_SOFTMAX, "forbidden_op", False),
        ("import torch\nif __name__ == '__main__' == __name__:\n" + MAIN_SOFTMAX, "forbidden_op", True),
        ("import torch\nMODE = 'x'\nif MODE == '__main__':\n" + MAIN_SOFTMAX, "forbidden_op", True),
        ("import torch\nif __name__ == 'kernel':\n" + MAIN_SOFTMAX, "forbidden_op", True),
        ("import torch\nif __name__ == torch.__name__:\n" + MAIN_SOFTMAX, "forbidden_op", True),
        (
            "import torch\nfrom math import pi, tau as __name__\nif __name__ == '__main__':\n" + MAIN_SOFTMAX,
            "forbidden_op",
            True,
        ),
        ("import torch\nif __name__ != '__main__':\n" + MAIN_SOFTMAX, "forbidden_op", True),
        ("import torch\nif __name__:\n" + MAIN_SOFTMAX, "forbidden_op", True),
        # the forbidden op: any library's, never Triton's own function of the same name
        (JIT + "@triton.jit\ndef k(p):\n    tl.store(p, tl.softmax(tl.load(p)))\n", "forbidden_op", False),
        ("import torch\ndef kernel(x):\n    return x.softmax(-1)\n", "forbidden_op", True),
        # an except handler that computes with torch or a library method falls back to the reference
        (
            (
                "import torch\ndef kernel(x):\n    try:\n        return x\n    except Exception:\n"
                "        return torch.abs(x)\n"
            ),
            "reference_fallback",
            True,
        ),
        (
            "import torch\ndef kernel(x):\n    try:\n        return x\n    except Exception:\n"
            "        return torch.empty_like(x)\n",
            "reference_fallback",
            False,
        ),
        (
            (
                "import torch\ndef kernel(x):\n    try:\n        return x\n    except Exception:\n"
                "        return x.flip(0)\n"
            ),
            "reference_fallback",
            False,
        ),
        (
            "import torch\ndef kernel(x):\n    try:\n        return x\n    except Exception:\n        return x.sum()\n",
            "reference_fallback",
            True,
        ),
        (
            JIT + "def kernel(x):\n    try:\n        return x\n    except Exception:\n        return tl.sum(x)\n",
            "reference_fallback",
            False,
        ),
        (
            (
                "import torch\ndef kernel(x):\n    try:\n        return x\n    except Exception:\n"
                "        return (lambda: x)()\n"
            ),
            "reference_fallback",
            False,
        ),
        # a class that only inherits the reference model
        (
            "import torch\nfrom task import Model\nclass ModelNew(Model):\n    '''Same.'''\n    pass\n",
            "reference_fallback",
            True,
        ),
        (
            "import torch\nfrom task import Model\nclass ModelNew(Model):\n    x = 1\n    pass\n",
            "reference_fallback",
            False,
        ),
        ("import torch\nclass ModelNew:\n    pass\n", "reference_fallback", False),
        (
            "import torch\nfrom task import Model\nclass ModelNew(torch.nn.Module, Model):\n    pass\n",
            "reference_fallback",
            True,
        ),
        ("import torch\nfrom task import Reference\nclass Fast(Reference):\n    pass\n", "reference_fallback", True),
        (
            "import torch\nfrom task import ReferenceModel\nclass Fast(ReferenceModel):\n    pass\n",
            "reference_fallback",
            True,
        ),
        (
            "import torch\nfrom task import Model\nclass ModelNew(Model):\n    print('built')\n    pass\n",
            "reference_fallback",
            False,
        ),
        ("import torch\nclass ModelNew((lambda: object)()):\n    pass\n", "reference_fallback", False),
        (
            "import torch\ndef kernel(x):\n    try:\n        return x\n    except Exception:\n"
            "        return x._softmax(0, False)\n",
            "reference_fallback",
            True,
        ),
        (
            "import torch\ndef kernel(x):\n    torchish = x\n    try:\n        return x\n    except Exception:\n"
            "        return torchish.flip(0)\n",
            "reference_fallback",
            False,
        ),
        (
            (
                "import torch\ndef kernel(x):\n    try:\n        return x\n    except Exception:\n"
                "        return tl.sum(x)\n"
            ),
            "reference_fallback",
            False,
        ),
    ],
    ids=[
        "main",
        "main-reversed",
        "main-chained",
        "other-name",
        "other-string",
        "not-a-constant",
        "name-imported",
        "not-main",
        "not-a-comparison",
        "triton-softmax",
        "method",
        "torch-in-handler",
        "allocation-in-handler",
        "tensor-method-in-handler",
        "library-method-in-handler",
        "triton-in-handler",
        "unnamed-call-in-handler",
        "inherits-with-docstring",
        "inherits-and-adds",
        "no-base",
        "one-base-of-two",
        "inherits-reference",
        "inherits-reference-model",
        "inherits-and-runs",
        "computed-base",
        "forbidden-method-in-handler",
        "torch-like-name-in-handler",
        "unresolved-triton-in-handler",
    ],
)
def test_library_rules(code: str, rule: str, present: bool) -> None:
    assert (rule in rules(code)) is present


def test_a_forbidden_prefix_never_covers_the_calls_that_only_allocate() -> None:
    code = "import torch\ndef kernel(x):\n    y = torch.empty_like(x)\n    return torch.exp(x)\n"
    scanner = Scanner(code, ast.parse(code), forbidden=("torch",), entry_point="kernel")
    assert [(f.rule, f.line) for f in scanner.run()] == [("forbidden_op", 4)]


@pytest.mark.parametrize(
    ("code", "rule", "present"),
    [
        # threading: locks only, every load of the module a .Lock/.RLock of it
        ("import threading\nLOCK = threading.Lock()\nOTHER = threading.RLock()\n", "thread_injection", False),
        (
            "import threading\nLOCK = threading.Lock()\nthreading.Thread(target=print).start()\n",
            "thread_injection",
            True,
        ),
        ("import threading\nLOCK = threading.Lock()\nT = threading\n", "thread_injection", True),
        ("import threading as th\nLOCK = th.Lock()\n", "thread_injection", False),
        ("from threading import Lock\nLOCK = Lock()\n", "thread_injection", False),
        ("from threading import Lock, Thread\nLOCK = Lock()\nThread(target=print)\n", "thread_injection", True),
        (
            "import threading\nLOCK = threading.Lock()\nx = [threading.Lock, threading.Event]\n",
            "thread_injection",
            True,
        ),
        ("import threading\nLOCK = threading.Lock().acquire\n", "thread_injection", False),
        ("import threading\nLOCK = threading.Lock()\nthreading = None\n", "thread_injection", False),
        ("import threading\ndel threading\n", "thread_injection", True),
        # an import is judged only where its bound name is used
        ("import subprocess as sp\ndef kernel(x):\n    return x\n", "subprocess_or_network", False),
        ("import subprocess as sp\ndef kernel(x):\n    sp.run(['ls'])\n    return x\n", "subprocess_or_network", True),
        (
            "from subprocess import run as go\ndef kernel(x):\n    go(['ls'])\n    return x\n",
            "subprocess_or_network",
            True,
        ),
        ("import subprocess\ndef kernel(x):\n    subprocess = 1\n    return x\n", "subprocess_or_network", False),
        ("import subprocess\ndef kernel(x):\n    del subprocess\n    return x\n", "subprocess_or_network", True),
        ("import subprocess\ndef kernel(x):\n    return vars()\n", "subprocess_or_network", True),
        ("import subprocess\ndef kernel(x):\n    return vars(x)\n", "subprocess_or_network", False),
        # vars(), globals(), locals(): the harness's namespaces; vars() of a plain object is not
        ("import torch\ndef kernel(x):\n    return globals()\n", "harness_introspection", True),
        ("import torch\ndef kernel(x):\n    return locals()\n", "harness_introspection", True),
        ("import torch\ndef kernel(x):\n    return vars(torch)\n", "harness_introspection", True),
        ("import torch\ndef kernel(x):\n    return vars(x)\n", "harness_introspection", False),
        ("import torch\ndef kernel(x):\n    return vars()\n", "harness_introspection", False),
        # names of the interpreter's own machinery
        ("import torch\ndef kernel(x):\n    return __builtins__\n", "harness_introspection", True),
        ("import torch\ndef kernel(x):\n    return __loader__\n", "harness_introspection", True),
        ("import torch\ndef kernel(x):\n    return __spec__\n", "harness_introspection", True),
        # native loaders: reported once per chain
        (
            "import torch\nimport triton\ndef kernel(x):\n    return triton.runtime.build.compile_module_from_src\n",
            "result_forgery",
            True,
        ),
        ("import torch\nimport triton\nBUILD = triton.runtime.build\n", "result_forgery", True),
    ],
    ids=[
        "locks",
        "thread",
        "module-itself",
        "aliased-locks",
        "from-lock",
        "from-thread",
        "event-in-list",
        "lock-method",
        "rebound-after-locks",
        "deleted-unused",
        "unused-alias",
        "used-alias",
        "used-from-alias",
        "shadowed",
        "deleted",
        "vars-reads-all",
        "vars-of-object",
        "globals",
        "locals",
        "vars-of-module",
        "vars-of-tensor",
        "vars-bare",
        "builtins",
        "loader",
        "spec",
        "native-loader",
        "native-loader-itself",
    ],
)
def test_process_rules(code: str, rule: str, present: bool) -> None:
    assert (rule in rules(code)) is present


def test_a_native_loader_chain_is_reported_once() -> None:
    code = "import torch\nimport triton\ndef kernel(x):\n    return triton.runtime.build.compile_module_from_src.x\n"
    assert [f.rule for f in scan(code, task_name="softmax")].count("result_forgery") == 1


def test_without_a_task_a_plain_call_in_a_handler_is_no_fallback() -> None:
    code = "import torch\ndef kernel(x):\n    try:\n        return x\n    except Exception:\n        return x.flip(0)\n"
    assert "reference_fallback" not in rules(code, task=None)
    assert "reference_fallback" in rules(code.replace("x.flip(0)", "torch.abs(x)"), task=None)
