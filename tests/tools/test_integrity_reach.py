"""The allow-list of what a kernel may reach (``ksearch.tools.integrity.reach``): every sideways road to the
interpreter that got past the name-based rules is refused with its line, and honest leaderboard idioms pass."""

from __future__ import annotations

import pytest

from ksearch.tools.integrity import check_source, scan

REFUSED = {
    # modules reached as attributes of allowed ones
    "torch_sys_modules": (
        "import torch\ndef kernel(x):\n    w = torch.sys.modules['ksearch.tools.evaluator.worker.main']\n    return x\n"
    ),
    "os_sys": "import os\ndef kernel(x):\n    m = os.sys.modules\n    return x\n",
    "task_torch_sys": (
        "from task import input_t\nimport task\ndef custom_kernel(data):\n    task.torch.sys.modules.clear()\n"
        "    return data[0]\n"
    ),
    "numpy_os": "import numpy as np\ndef kernel(x):\n    np.os.getppid()\n    return x\n",
    "warnings_sys": "import warnings\ndef kernel(x):\n    warnings.sys._getframe(1)\n    return x\n",
    "object_step_sys": "import torch\ndef kernel(x):\n    t = torch.empty(1)\n    t.sys.modules\n    return x\n",
    "from_torch_import_sys": "from torch import sys\ndef kernel(x):\n    return sys.modules\n",
    # dunders that walk to the interpreter's tables
    "globals_dunder": "def helper():\n    pass\ndef kernel(x):\n    g = helper.__globals__\n    return x\n",
    "subclasses": "def kernel(x):\n    for c in ().__class__.__base__.__subclasses__():\n        pass\n    return x\n",
    "dict_dunder": "import torch\ndef kernel(x):\n    torch.__dict__['cuda']\n    return x\n",
    "traceback_dunder": (
        "def kernel(x):\n    try:\n        1 / 0\n    except Exception as e:\n        t = e.__traceback__\n"
        "    return x\n"
    ),
    # getattr: a computed name, a dunder by constant, the builtin passed around
    "computed_getattr": "def kernel(x):\n    name = '_' + 'version'\n    v = getattr(x, name)\n    return x\n",
    "computed_frame_attr": (
        "import torch\ndef kernel(x):\n    n = 'f_' + 'back'\n    return getattr(torch, ''.join(['s', 'ys']))\n"
    ),
    "getattr_dunder_constant": "def kernel(x):\n    return getattr(kernel, '__globals__')\n",
    "getattr_as_value": "import functools\ndef kernel(x):\n    f = functools.partial(getattr, x)\n    return x\n",
    "attrgetter_dunder": "import operator\ndef kernel(x):\n    return operator.attrgetter('__class__.__base__')(x)\n",
    "format_string": "def kernel(x):\n    s = '{0.__globals__}'.format(kernel)\n    return x\n",
    # private names of modules, restricted modules
    "torch_C": "import torch\ndef kernel(x):\n    torch._C._set_grad_enabled(False)\n    return x\n",
    "from_torch_import_C": "from torch import _C\ndef kernel(x):\n    _C._set_grad_enabled(False)\n    return x\n",
    "sys_path": "import sys\ndef kernel(x):\n    sys.path.insert(0, '/tmp')\n    return x\n",
    "os_read": "import os\ndef kernel(x):\n    fd = os.open('/proc/self/environ', 0)\n    return x\n",
    "dynamo_internals": (
        "import torch\ndef kernel(x):\n    torch._dynamo.eval_frame.set_eval_frame(None)\n    return x\n"
    ),
    # files, pickles, native libraries, operator overrides
    "open_for_reading": "def kernel(x):\n    p = '/proc/' + str(1) + '/environ'\n    open(p).read()\n    return x\n",
    "torch_load": "import torch\ndef kernel(x):\n    return torch.load('/tmp/out.pt')\n",
    "load_library": "import torch\ndef kernel(x):\n    torch.ops.load_library('/tmp/evil.so')\n    return x\n",
    "aten_override": "import torch\nlib = torch.library.Library('aten', 'IMPL')\ndef kernel(x):\n    return x\n",
    # roads the red team found (issue 30): a class pattern's keywords, vars() of an expression, names folded from
    # constants, a partly computed name on an object, annotation strings evaluated, the Python C API in C++
    "match_class_keyword": (
        "import torch\nmatch torch:\n    case object(sys=s):\n        pass\ndef kernel(x):\n    return x\n"
    ),
    "vars_of_expression": "import torch\ndef kernel(x):\n    m = vars([torch][0])['sys']\n    return x\n",
    "concatenated_name": "import torch\ndef kernel(x):\n    s = getattr([torch][0], 's' + 'ys')\n    return x\n",
    "fstring_folded_name": "import torch\ndef kernel(x):\n    s = getattr([torch][0], f\"s{'ys'}\")\n    return x\n",
    "partly_computed_on_object": (
        "import torch\nrest = 'ys'\ndef kernel(x):\n    s = getattr([torch][0], 's' + rest)\n    return x\n"
    ),
    "type_hints_eval": (
        "import typing\ndef f(a: 'x'): pass\ndef kernel(x):\n    typing.get_type_hints(f)\n    return x\n"
    ),
    "singledispatch": "import functools\n@functools.singledispatch\ndef g(a): pass\ndef kernel(x):\n    return x\n",
    "python_c_api": "src = 'void run(const char* c) { PyRun_SimpleString(c); }'\ndef kernel(x):\n    return x\n",
    "pybind_import": "src = 'auto sys = py::module_::import(\"sys\");'\ndef kernel(x):\n    return x\n",
    "aten_impl": (
        "import torch\n@torch.library.impl('aten::add.Tensor', 'CUDA')\ndef add(a, b):\n    return a\n"
        "def kernel(x):\n    return x\n"
    ),
}
UNLISTED = {
    "traceback": "import traceback\ndef kernel(x):\n    traceback.extract_stack()\n    return x\n",
    "io": "import io\ndef kernel(x):\n    io.open(3, 'wb')\n    return x\n",
    "pathlib": "from pathlib import Path\ndef kernel(x):\n    Path('/proc/1/environ').read_text()\n    return x\n",
    "json_ok_but_requests_not": "import requests\ndef kernel(x):\n    requests.get\n    return x\n",
}
HONEST = {
    "versions": (
        "import torch, triton\nprint(torch.__version__, triton.__version__)\ndef kernel(x):\n    return x.clone()\n"
    ),
    "super_init": (
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.name = self.__class__.__name__\n"
    ),
    "stderr": "import sys\ndef kernel(x):\n    print('hi', file=sys.stderr)\n    return x.clone()\n",
    "logging": (
        "import logging\nlog = logging.getLogger(__name__)\nlogging.basicConfig(level=logging.INFO)\ndef kernel(x):\n"
        "    log.info('x')\n    return x.clone()\n"
    ),
    "scaled_mm": "import torch\ndef kernel(a, b, sa, sb):\n    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb)\n",
    "inductor_config": (
        "import torch\ntorch._inductor.config.coordinate_descent_tuning = True\n"
        "torch._dynamo.config.cache_size_limit = 64\ndef kernel(x):\n    return x.clone()\n"
    ),
    "inductor_config_import": (
        "from torch._inductor import config\nconfig.max_autotune = False\ndef kernel(x):\n    return x.clone()\n"
    ),
    "aten_private_op": "import torch\ndef kernel(a, b):\n    return torch.ops.aten._scaled_mm(a, b)\n",
    "custom_op": (
        "import torch\n@torch.library.custom_op('mylib::add1', mutates_args=())\n"
        "def add1(x: torch.Tensor) -> torch.Tensor:\n    return x + 1\ndef kernel(x):\n    return add1(x)\n"
    ),
    "getattr_constant": (
        "import triton.language as tl\ndef kernel(x):\n    f = getattr(tl, 'exp', None)\n    return x.clone()\n"
    ),
    "getattr_fstring": (
        "class M:\n    def __init__(self):\n        for i in range(3):\n            setattr(self, f'w{i}', i)\n"
        "    def get(self, i):\n        return getattr(self, f'w{i}')\n"
    ),
    "getattr_loop": (
        "class M:\n    def forward(self, x):\n        for name in ('proj', 'gate'):\n"
        "            x = getattr(self, name)(x)\n        return x\n"
    ),
    "weight_version": "import torch\n_C = {}\ndef kernel(x, w):\n    tag = (id(w), w._version)\n    return x.clone()\n",
    "device_props": (
        "import torch, triton\ndef kernel(x):\n    n = "
        "triton.runtime.driver.active.utils.get_device_properties("
        "torch.cuda.current_device())['multiprocessor_count']\n    return x.clone()\n"
    ),
    "os_path_and_build_vars": (
        "import os\nos.environ.setdefault('MAX_JOBS', '4')\nHERE = os.path.dirname\ndef kernel(x):\n"
        "    return x.clone()\n"
    ),
    "unused_import": "import requests  # left over\ndef kernel(x):\n    return x.clone()\n",
    "format_plain": "def kernel(x):\n    s = 'shape {} {:>5}'.format(x.shape, 3)\n    return x.clone()\n",
    "match_positional": (
        "import torch\ndef kernel(x):\n    match x.shape:\n        case (m, n):\n            return x.clone()\n"
        "    return x\n"
    ),
    "getattr_own_fstring_number": "class M:\n    def get(self, i):\n        return getattr(self, f'w{i}')\n",
    "pybind_module": (
        "src = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"run\", &run); }'\ndef kernel(x):\n"
        "    return x.clone()\n"
    ),
    "cuda_array_interface": "def kernel(x):\n    p = x.__cuda_array_interface__\n    return x.clone()\n",
}


def _rules(code: str) -> list[str]:
    return [f.rule for f in scan(code, task_name="trimul")]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_road_to_the_interpreter_is_refused_with_its_line(name: str) -> None:
    code = REFUSED[name]
    rejection = check_source(code, task_name="trimul")
    assert rejection is not None, name
    assert "interpreter_reach" in _rules(code) or rejection.rule in ("harness_introspection", "dynamic_code"), rejection
    assert rejection.evidence.startswith("line "), rejection.evidence


@pytest.mark.parametrize("name", sorted(UNLISTED))
def test_modules_off_the_list_are_refused(name: str) -> None:
    code = UNLISTED[name]
    assert "unlisted_import" in _rules(code) or check_source(code, task_name="trimul") is not None


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_idioms_pass(name: str) -> None:
    assert scan(HONEST[name], task_name="trimul") == [], name


def test_the_routes_of_the_issue_are_named_interpreter_reach() -> None:
    """The three roads of issue 30's first class, each caught by the reach rule itself (not by luck elsewhere)."""
    for name in (
        "torch_sys_modules",
        "os_sys",
        "task_torch_sys",
        "computed_getattr",
        "getattr_dunder_constant",
        "format_string",
        "torch_C",
    ):
        assert "interpreter_reach" in _rules(REFUSED[name]), name


def test_a_private_step_must_stay_on_an_allowed_path() -> None:
    """``torch._inductor`` is allowed only on the way to ``torch._inductor.config``."""
    assert "interpreter_reach" in _rules("import torch\ndef kernel(x):\n    torch._inductor.utils.x\n    return x\n")
    assert "interpreter_reach" not in _rules("import torch\ntorch._inductor.config.x = 1\n")


def test_the_task_support_modules_are_importable() -> None:
    code = (
        "from task import input_t, output_t\nfrom utils import DisableCuDNNTF32\n"
        "def custom_kernel(data: input_t) -> output_t:\n    return data[0]\n"
    )
    assert "unlisted_import" not in _rules(code)
    assert "unlisted_import" in [f.rule for f in scan(code, task_name="softmax")]
