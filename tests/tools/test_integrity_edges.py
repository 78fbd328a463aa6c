"""Static integrity rules, case by case, with the exact set of rules each snippet breaks (``scan`` lists every finding,
so a rule that stops firing is seen even where another rule rejects the same code): output caching through every
container form, file opens by mode letter, the environment's allowed forms, timer patches, and the reach rules'
imports, attribute steps, ``getattr`` names and format strings. Each dishonest form has an honest neighbour that
must pass."""

from __future__ import annotations

import pytest

from ksearch.tools.integrity import scan


def _rules(code: str, task: str = "softmax") -> set[str]:
    return {f.rule for f in scan(code, task_name=task)}


def _details(code: str, task: str = "softmax") -> list[str]:
    return [f.detail for f in scan(code, task_name=task)]


T = "import torch\n"
TRI = "import torch\n_W = {}\ndef custom_kernel(data):\n    x, mask, weights, config = data\n"


def _replay(store: str) -> str:
    return (
        T + "_C = {}\ndef kernel(x):\n    k = x.shape\n    if k in _C:\n        return _C[k]\n    y = x * 2\n"
        f"    {store}\n    return y\n"
    )


CACHING = [
    pytest.param(
        T + "import functools\nclass ModelNew(torch.nn.Module):\n    @functools.lru_cache\n"
        "    def forward(self, x):\n        return x * 2\n",
        {"output_caching"},
        id="memoised-forward",
    ),
    pytest.param(
        T + "import functools\n@functools.lru_cache\ndef prep(n: int, *, w: torch.Tensor):\n    return w * n\n",
        {"output_caching"},
        id="memoised-keyword-only-tensor",
    ),
    pytest.param(
        T + "import functools\n@functools.lru_cache\ndef prep(w: torch.Tensor, /, n: int):\n    return w * n\n",
        {"output_caching"},
        id="memoised-positional-only-tensor",
    ),
    pytest.param(
        T + "import functools\n@functools.lru_cache\ndef prep(*ws: torch.Tensor):\n    return ws\n",
        {"output_caching"},
        id="memoised-star-args-tensor",
    ),
    pytest.param(
        T + "import functools\n@functools.lru_cache\ndef prep(**ws: torch.Tensor):\n    return ws\n",
        {"output_caching"},
        id="memoised-star-kwargs-tensor",
    ),
    pytest.param(
        T + "import functools\n@functools.lru_cache\ndef _prep(n):\n    return n\ndef kernel(x):\n    _prep(n=x)\n"
        "    return x\n",
        {"output_caching"},
        id="memoised-called-with-an-input-by-keyword",
    ),
    pytest.param(
        T + "import functools\n@functools.lru_cache\ndef _prep(n):\n    return n\ndef kernel(x):\n"
        "    _prep(x.data_ptr())\n    return x\n",
        {"output_caching"},
        id="memoised-called-with-a-pointer",
    ),
    pytest.param(
        T + "def kernel(x, w):\n    w[x.data_ptr()] = x * 2\n    return x\n",
        {"output_caching"},
        id="input-container-keyed-by-pointer",
    ),
    pytest.param(
        T + "def kernel(x, w):\n    w[x] = x * 2\n    return x\n",
        {"output_caching"},
        id="input-container-keyed-by-input",
    ),
    pytest.param(
        T + "def kernel(x, w):\n    k = x.data_ptr()\n    w[k] = x * 2\n    return x\n",
        {"output_caching"},
        id="input-container-keyed-by-a-pointer-variable",
    ),
    pytest.param(
        T + "def kernel(x, w):\n    k = id(x)\n    w[k] = x * 2\n    return x\n",
        {"output_caching"},
        id="input-container-keyed-by-an-id-variable",
    ),
    pytest.param(
        T + "import zlib\n_C = {}\ndef kernel(x):\n    return _C.get(zlib.crc32(str(x).encode()))\n",
        {"output_caching", "unlisted_import"},
        id="keyed-by-a-checksum",
    ),
    pytest.param(
        T + "import hashlib\n_C = {}\ndef kernel(x):\n    return _C[hashlib.sha1(b'k').hexdigest()]\n",
        {"output_caching", "unlisted_import"},
        id="keyed-by-a-digest",
    ),
    pytest.param(T + "_C = {}\ndef kernel(x):\n    return _C.get(id(x))\n", {"output_caching"}, id="keyed-by-id"),
    pytest.param(T + "_C = {}\ndef kernel(x):\n    return _C.get(hash(x))\n", {"output_caching"}, id="keyed-by-hash"),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    return _C.get(bytes(x.numpy()))\n",
        {"output_caching"},
        id="keyed-by-bytes-of-the-values",
    ),
    pytest.param(T + "_C = {}\ndef kernel(x):\n    return _C.get(x._cdata)\n", {"output_caching"}, id="keyed-by-cdata"),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    return _C.get(len(x) + x.data_ptr())\n",
        {"output_caching"},
        id="keyed-by-a-pointer-after-a-builtin-of-the-input",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    return _C.get(tuple(x.shape) + (x.data_ptr(),))\n",
        {"output_caching"},
        id="keyed-by-the-shape-and-a-pointer",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    return _C.get((tuple(x), x.data_ptr()))\n",
        {"output_caching"},
        id="keyed-by-a-builtin-of-the-input-then-a-pointer",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    return _C.get(bytes(str(x.data_ptr()), 'ascii'))\n",
        {"output_caching"},
        id="keyed-by-the-bytes-of-a-pointer",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    k = id(x)\n    return _C.get(bytes(k))\n",
        {"output_caching"},
        id="keyed-by-the-bytes-of-an-id-variable",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    return _C.get((x, 1))\n",
        {"output_caching"},
        id="keyed-by-a-tuple-with-an-input",
    ),
    pytest.param(
        T + "_SEEN = set()\ndef kernel(x):\n    if x in _SEEN:\n        pass\n    return x\n",
        {"output_caching"},
        id="input-tested-in-a-container",
    ),
    pytest.param(
        T + "_LAST = []\ndef kernel(x):\n    if x is _LAST:\n        pass\n    return x\n",
        {"output_caching"},
        id="input-compared-to-a-container-on-the-right",
    ),
    pytest.param(
        T + "_LAST = [None]\ndef kernel(x):\n    if x is _LAST[0]:\n        pass\n    return x\n",
        {"output_caching"},
        id="input-compared-to-an-item-on-the-right",
    ),
    pytest.param(
        T + "_LAST = [None]\ndef kernel(x):\n    if _LAST[0] is x:\n        pass\n    return x\n",
        {"output_caching"},
        id="input-compared-to-an-item-on-the-left",
    ),
    pytest.param(_replay("_C[k] = y"), {"output_caching"}, id="replay-stored-by-item"),
    pytest.param(_replay("_C.setdefault(k, y)"), {"output_caching"}, id="replay-stored-by-setdefault"),
    pytest.param(_replay("_C.__setitem__(k, y)"), {"output_caching"}, id="replay-stored-by-setitem"),
    pytest.param(_replay("_C.update(k, y)"), {"output_caching"}, id="replay-stored-by-update"),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    k = x.shape\n    if k in _C:\n        return _C[k]\n    y = _C[k] = x * 2\n"
        "    return y\n",
        {"output_caching"},
        id="replay-stored-by-chained-assignment",
    ),
    pytest.param(
        T + "def kernel(x, cache):\n    n = x.shape[0]\n    if n in cache:\n        return cache[n]\n    y = x * 2\n"
        "    cache[n] = y\n    return y\n",
        {"output_caching"},
        id="replay-from-an-input-container",
    ),
]
CACHING += [
    pytest.param(
        T + f"_C = {{}}\ndef kernel(x):\n    _C.{method}({args})\n    return x\n",
        {"output_caching"},
        id=f"container-{method}-with-an-input",
    )
    for method, args in [
        ("get", "x"),
        ("setdefault", "x, 0"),
        ("pop", "x"),
        ("__contains__", "x"),
        ("__getitem__", "x"),
        ("__setitem__", "x, 0"),
        ("add", "x"),
        ("append", "x"),
        ("update", "x"),
    ]
]

HONEST_CACHING = [
    pytest.param(
        TRI + "    w = _W.get(id(weights))\n    if w is None:\n"
        "        w = _W[id(weights)] = weights['norm.weight'].float()\n"
        "    return x * w\n",
        "trimul",
        id="derived-weights-by-the-weights-identity",
    ),
    pytest.param(
        TRI + "    key = (id(weights), id(config))\n    w = _W.get(key)\n    if w is None:\n"
        "        w = _W[key] = weights['norm.weight'].float()\n    return x * w\n",
        "trimul",
        id="derived-weights-by-weights-and-config",
    ),
    pytest.param(
        T + "_BUF = {}\ndef kernel(x):\n    key = (x.shape, x.dtype)\n    if key not in _BUF:\n"
        "        buf = _BUF[key] = torch.empty_like(x)\n    _BUF[key].copy_(x * 2)\n    return _BUF[key]\n",
        "softmax",
        id="a-cached-output-buffer-filled-every-call",
    ),
    pytest.param(
        T + "_BUF = {}\ndef kernel(x):\n    key = (x.size(0), x.size(1))\n    if key not in _BUF:\n"
        "        _BUF[key] = torch.empty_like(x)\n    out = _BUF[key]\n    out.copy_(x)\n    return out\n",
        "softmax",
        id="a-buffer-keyed-by-sizes",
    ),
    pytest.param(
        T + "def kernel(x):\n    d = {}\n    k = x.shape\n    y = x * 2\n    d[k] = y\n    return d[k]\n",
        "softmax",
        id="a-local-dict",
    ),
    pytest.param(
        T + "def kernel(x):\n    d = {}\n    k = x.shape\n    y = x * 2\n    d[k] = y\n    if k in d:\n"
        "        return d[k]\n    return y\n",
        "softmax",
        id="a-local-dict-read-back",
    ),
    pytest.param(
        T + "def kernel(x):\n    out = [[0]]\n    out[0][0] = 1\n    return x\n", "softmax", id="a-nested-item-store"
    ),
    pytest.param(
        T + "def kernel(x):\n    d = {}\n    k = x.shape\n    y = x * 2\n    d.setdefault(k, y)\n    if k in d:\n"
        "        return d[k]\n    return y\n",
        "softmax",
        id="a-local-dict-setdefault-read-back",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    k = x.shape\n    y = x * 2\n    _C.pop(k, y)\n    if k in _C:\n"
        "        return _C[k]\n    return y\n",
        "softmax",
        id="a-pop-with-a-default-stores-nothing",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    k = x.shape\n    buf = _C.setdefault(k, torch.empty_like(x))\n"
        "    buf.copy_(x)\n    return _C[k]\n",
        "softmax",
        id="a-buffer-made-by-setdefault",
    ),
    pytest.param(
        T + "_LOG = []\ndef kernel(x):\n    _LOG.extend(x)\n    return x\n",
        "softmax",
        id="a-container-method-that-is-no-lookup",
    ),
    pytest.param(
        T + "_STACK = [1]\ndef kernel(x):\n    _STACK.pop()\n    return x\n", "softmax", id="a-pop-without-a-key"
    ),
    pytest.param(
        T + "def kernel(x):\n    parts = []\n    parts.append(x)\n    return torch.cat(parts)\n",
        "softmax",
        id="a-local-list-append",
    ),
    pytest.param(
        T + "_WEIGHT = torch.ones(4)\n_C = {}\ndef kernel(x):\n    w = _C.get(_WEIGHT.data_ptr())\n    return x\n",
        "softmax",
        id="keyed-by-a-module-tensors-pointer",
    ),
    pytest.param(
        T + "_SCALE = torch.ones(())\n_C = {}\ndef kernel(x):\n    b = _C.get((x.shape, _SCALE.float().item()))\n"
        "    return x\n",
        "softmax",
        id="keyed-by-a-module-tensors-value-through-a-call",
    ),
    pytest.param(
        TRI + "    return x * _W.setdefault((id(weights), id(config)), weights['norm.weight'].float())\n",
        "trimul",
        id="derived-weights-keyed-by-exactly-the-parameters",
    ),
    pytest.param(
        T + "_LIMITS = [4096]\ndef kernel(x):\n    if x < _LIMITS:\n        pass\n    return x\n",
        "softmax",
        id="an-ordering-comparison-is-no-lookup",
    ),
    pytest.param(
        T + "def kernel(x, cache):\n    n = x.shape[0]\n    y = x * 2\n    cache[n] = y\n    return cache[n]\n",
        "softmax",
        id="an-input-container-written-then-read-in-one-call",
    ),
    pytest.param(
        T + "_C = {'out': None}\ndef kernel(x, w):\n    w['out'] = x.float()\n    return _C['out']\n",
        "softmax",
        id="a-module-constant-under-a-key-also-stored-in-an-input",
    ),
    pytest.param(T + "def kernel(x, idx):\n    return x[idx]\n", "softmax", id="a-gather"),
    pytest.param(
        T + "def kernel(x, y):\n    ptrs = [y.data_ptr()]\n    if x.data_ptr() in ptrs:\n        x = x.clone()\n"
        "    return x\n",
        "softmax",
        id="an-aliasing-check-in-a-local-list",
    ),
    pytest.param(
        T + "def kernel(x, y):\n    p = x.data_ptr()\n    q = y.data_ptr()\n    if p == q:\n        x = x.clone()\n"
        "    return x\n",
        "softmax",
        id="an-aliasing-check-of-two-pointers",
    ),
    pytest.param(
        T + "def kernel(x, y):\n    if x.shape[0] == y.shape[0]:\n        pass\n    return x\n",
        "softmax",
        id="a-shape-comparison",
    ),
    pytest.param(
        T + "def kernel(x):\n    parts = [x]\n    if parts[0] is x:\n        pass\n    return x\n",
        "softmax",
        id="a-local-list-item-compared",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    b = _C.get(tuple(x.shape))\n    return x\n",
        "softmax",
        id="keyed-by-the-shape-as-a-tuple",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x, sizes):\n    b = _C.get(tuple(sizes))\n    return x\n",
        "softmax",
        id="keyed-by-a-config-input-as-a-tuple",
    ),  # a builtin of an input, with no fingerprint in it
    pytest.param(
        T + "_WEIGHT = torch.ones(4)\n_C = {}\ndef kernel(x):\n    w = _C.get(id(_WEIGHT))\n    return x\n",
        "softmax",
        id="keyed-by-a-module-tensors-identity",
    ),
    pytest.param(
        T + "_C = {}\ndef kernel(x):\n    b = _C.get(hash(x.shape))\n    return x\n",
        "softmax",
        id="keyed-by-the-hash-of-the-shape",
    ),  # hash of a value read off an input, not of the input
    pytest.param(
        T
        + "class K:\n    def __init__(self):\n        self.c = {}\n    def kernel(self, x):\n        if x in self.c:\n"
        "            pass\n        return x\n",
        "softmax",
        id="an-attribute-container",
    ),
]


@pytest.mark.parametrize(("code", "rules"), CACHING)
def test_output_caching_is_found_in_every_form(code: str, rules: set[str]) -> None:
    assert _rules(code) == rules, scan(code, task_name="softmax")


@pytest.mark.parametrize(("code", "task"), HONEST_CACHING)
def test_honest_containers_pass(code: str, task: str) -> None:
    assert scan(code, task_name=task) == []


def test_a_replay_names_the_container_it_returns_from() -> None:
    assert _details(_replay("_C[k] = y")) == ["returns the output it stored in _C"]
    assert _details(T + "def kernel(x, w):\n    w['y'] = x * 2\n    return w['y']\n") == [
        "returns w['y'], a value cached in an input container"
    ]


# ---- files, the environment, timers --------------------------------------------------------------------------------

OPEN = "p = 'f.txt'\nm = 'w'\nh = open(p, {})\n"


@pytest.mark.parametrize("mode", ["'w'", "'a'", "'x'", "'r+'", "'wb'", "mode='a'", "encoding='utf8', mode='w'"])
def test_opening_a_file_to_write_is_result_forgery_whatever_the_mode_letter(mode: str) -> None:
    assert _rules(OPEN.format(mode)) == {"interpreter_reach", "result_forgery"}


@pytest.mark.parametrize("mode", ["'r'", "'rb'", "m", "1", "encoding='utf8'"])
def test_opening_a_file_to_read_is_only_interpreter_reach(mode: str) -> None:
    assert _rules(OPEN.format(mode)) == {"interpreter_reach"}


@pytest.mark.parametrize("code", ["h = open('f.txt')\n", "p = 'f.txt'\nh = open(p)\n"])
def test_open_with_a_path_and_no_mode_reads(code: str) -> None:
    assert _rules(code) == {"interpreter_reach"}


@pytest.mark.parametrize("code", ["h = open(3)\n", "h = open(3, 'w')\n"])
def test_opening_a_descriptor_is_result_forgery(code: str) -> None:
    assert _rules(code) == {"interpreter_reach", "result_forgery"}
    assert "opens file descriptor 3" in _details(code)


ENV = "import os\n"


@pytest.mark.parametrize(
    "code",
    [
        ENV + "g = os.environ.get\n",  # handed around: its name could be anything
        ENV
        + "def f(*a):\n    pass\nf('MAX_JOBS', os.environ.get)\n",  # a build variable next to it is not its argument
        ENV + "v = os.environ.get()\n",
        ENV + "del os.environ['MAX_JOBS']\n",  # only reading, testing and setting a build variable are allowed
        ENV + "ok = 'MAX_JOBS' in os.environ == True\n",
        ENV + "has = 'OPENAI_API_KEY' in os.environ\n",
        ENV + "same = 'MAX_JOBS' == os.environ\n",
    ],
)
def test_the_environment_outside_the_allowed_forms_is_environment_access(code: str) -> None:
    assert _rules(code) == {"environment_access"}


@pytest.mark.parametrize(
    "code",
    [
        ENV + "has = 'MAX_JOBS' in os.environ\n",
        ENV + "lacks = 'MAX_JOBS' not in os.environ\n",
        ENV + "v = os.environ.get('MAX_JOBS', '1')\n",
        ENV + "os.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\n",
    ],
)
def test_the_allowed_forms_on_a_build_variable_pass(code: str) -> None:
    assert scan(code, task_name="softmax") == []


def test_a_timer_patch_names_the_timer() -> None:
    assert _details("import time\ntime.perf_counter = lambda: 0.0\n") == ["assigns time.perf_counter"]
    assert _details("import time\nsetattr(time, 'perf_counter', 1)\n") == ["setattr time.perf_counter"]


def test_a_timer_name_patched_on_any_module_is_a_timer_patch() -> None:
    assert _rules("import torch\ntorch.mean = print\n") == {"timer_monkeypatch"}


def test_an_attribute_named_like_a_timer_on_an_object_is_not_a_timer_patch() -> None:
    assert scan("class C:\n    pass\nc = C()\nsetattr(c, 'perf_counter', 1)\nc.time = 2\n", task_name="softmax") == []


@pytest.mark.parametrize(
    ("setting", "refused"),
    [
        ("torch._inductor.config.max_autotune", False),
        ("torch._inductor.config.coordinate_descent_tuning", False),
        ("torch._inductor.config.triton.cudagraphs", True),
        ("torch._inductor.config.compile_threads", True),
        ("torch._dynamo.config.cache_size_limit", False),
        ("torch.backends.cudnn.benchmark", False),
    ],
)
def test_compiler_settings_are_allowed_except_those_that_replay_or_start_workers(setting: str, refused: bool) -> None:
    rules = _rules(f"import torch\n{setting} = True\n")
    assert rules == ({"harness_introspection"} if refused else set())


# ---- reach ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "rules"),
    [
        ("from torch import _C\nx = _C\n", {"interpreter_reach"}),
        ("from os import system\nsystem('id')\n", {"interpreter_reach", "subprocess_or_network"}),
        ("from os import environ\nx = environ\n", {"environment_access"}),
        ("import os.path\nx = os.path.join('a')\n", set()),
        ("from torch import nn\nx = nn.Linear\n", set()),
        ("from torch._dynamo.config import cache_size_limit\nx = cache_size_limit\n", set()),
    ],
)
def test_from_imports_are_judged_as_the_attribute_they_bind(code: str, rules: set[str]) -> None:
    assert _rules(code) == rules


@pytest.mark.parametrize(
    ("code", "rules"),
    [
        (T + "def kernel(x):\n    return x.__dict__\n", {"interpreter_reach"}),
        (T + "def kernel(x):\n    return x.__class__.__name__\n", set()),
        (T + "def kernel(x):\n    return x.__foo\n", set()),  # not a dunder: an attribute of the object
        (T + "def kernel(x):\n    return x.foo__\n", set()),
        (T + "def kernel(x):\n    return x._foo__\n", set()),
        (T + "def kernel(x):\n    return x.__foo_\n", set()),
        (T + "def kernel(x):\n    return x._version\n", set()),  # an object's private name: only modules' are refused
        (T + "f = torch._inductor.configx\n", {"interpreter_reach"}),
        (T + "f = torch._inductor.config.max_autotune\n", set()),
        (T + "f = torch._assert_async\n", {"interpreter_reach"}),
        (T + "f = torch._assert\n", set()),
        (T + "f = torch._foreach_add\n", set()),  # a prefix ending in _ covers what extends it
        (T + "f = torch.ops.aten.add\n", set()),
        (T + "f = torch.ops\n", set()),  # a prefix ending in . covers the name itself
        (T + "torch._dynamo.reset()\n", set()),
        (T + "torch._dynamo.reset_code_caches()\n", {"interpreter_reach"}),
        (T + "torch._dynamo.config._save_config()\n", set()),  # anything under an allowed private module
    ],
)
def test_attribute_steps(code: str, rules: set[str]) -> None:
    assert _rules(code) == rules


@pytest.mark.parametrize(
    ("code", "rules"),
    [
        (T + "c = getattr(torch, '_C')\n", {"interpreter_reach"}),
        (T + "c = getattr(torch.cuda, '_lazy_init')\n", {"interpreter_reach"}),
        (T + "c = getattr(torch, 'float32')\n", set()),
        (T + "def kernel(x):\n    return getattr(x, '__dict__')\n", {"interpreter_reach"}),
        (T + "def kernel(x):\n    return getattr(x)\n", set()),  # no name to judge
        (T + "c = getattr(torch.zeros(1), '_version')\n", set()),  # through a call: an object, not the module
        (T + "c = getattr(torch.zeros(1).T, '_version')\n", set()),
        (T + "def kernel(x):\n    return getattr(x, '_version')\n", set()),  # a parameter is no module
        (T + "def kernel(x, i):\n    return getattr(x, 'w' * 2 + str(i))\n", {"interpreter_reach"}),
        (T + "c = getattr(torch, 1)\n", {"interpreter_reach"}),
        (T + "def kernel(x, i):\n    return getattr(x, f'{i}')\n", {"interpreter_reach"}),
        (T + "def kernel(x, i):\n    return getattr(x, f'_w{i}')\n", {"interpreter_reach"}),
        (T + "def kernel(x, i):\n    return getattr(x, '_' + str(i))\n", {"interpreter_reach"}),
        (T + "def kernel(x, i):\n    return getattr(x, i + 'w')\n", {"interpreter_reach"}),
        (T + "def kernel(x, i):\n    return getattr(x, 'w' * 2)\n", {"interpreter_reach"}),
        (T + "def kernel(x, i):\n    return getattr(x, 1 + i)\n", {"interpreter_reach"}),
        (T + "def kernel(x):\n    for n in ('w1', 'w2'):\n        getattr(x, n)\n    return x\n", set()),
        ("import operator\nf = operator.attrgetter('__globals__')\n", {"interpreter_reach"}),
        ("import operator\nf = operator.attrgetter('shape')\n", set()),
    ],
)
def test_getattr_names(code: str, rules: set[str]) -> None:
    assert _rules(code) == rules


OWN = "class M:\n    def get(self, i, n):\n        return getattr({}, {})\n"


@pytest.mark.parametrize(
    ("code", "rules"),
    [
        (OWN.format("self", "f'w{i}'"), set()),
        (OWN.format("self", "'w' + str(i)"), set()),
        (OWN.format("self", "'w' + str(i) + '_' + str(n)"), set()),  # the leftmost of a chain of + decides
        ("class M:\n    @classmethod\n    def get(cls, i):\n        return getattr(cls, f'w{i}')\n", set()),
        (OWN.format("self", "f'_w{i}'"), {"interpreter_reach"}),
        (OWN.format("self", "'_' + str(i)"), {"interpreter_reach"}),
        (OWN.format("self", "i + 'w'"), {"interpreter_reach"}),
        (OWN.format("self", "str(i) + 'w'"), {"interpreter_reach"}),
        (OWN.format("self", "1 + i"), {"interpreter_reach"}),
        (OWN.format("self", "n"), {"interpreter_reach"}),  # a parameter: anything
        (OWN.format("self", "'w' * n"), {"interpreter_reach"}),  # only + keeps the first letter
        (OWN.format("self", "'w' * n + '__dict__'"), {"interpreter_reach"}),  # '' + '__dict__' when n is 0
        (OWN.format("self.m", "f'w{i}'"), {"interpreter_reach"}),  # an attribute of self is another object
        ("def kernel(x, i):\n    return getattr(x, f'w{i}')\n", {"interpreter_reach"}),  # a parameter is not self
        ("def kernel(x, i):\n    return getattr(x, 'w' + str(i))\n", {"interpreter_reach"}),
    ],
)
def test_a_computed_name_passes_only_on_self_or_cls_and_from_a_letter(code: str, rules: set[str]) -> None:
    """A name computed at run time is judged by its first character, on the candidate's own object only."""
    assert _rules(code) == rules


def test_getattr_on_a_module_names_the_whole_path_at_its_line() -> None:
    found = scan(T + "c = getattr(torch.cuda, '_lazy_init')\n", task_name="softmax")
    assert [(f.line, f.detail) for f in found] == [(2, "uses torch.cuda._lazy_init, a private name of a module")]


@pytest.mark.parametrize(
    ("code", "rules"),
    [
        (T + "w = torch.load('w.pt')\n", {"interpreter_reach"}),
        (T + "lib = torch.library.Library('aten', 'IMPL')\n", {"interpreter_reach"}),
        (T + "lib = torch.library.Library('mylib', 'DEF')\n", set()),
        (T + "def f(*a):\n    pass\nf('aten::add')\n", set()),  # an aten name outside torch.library
        ("def kernel(x):\n    return '{0.__globals__}'.format(kernel)\n", {"interpreter_reach"}),
        ("def kernel(x):\n    return '{a.b}'.format_map({'a': x})\n", {"interpreter_reach"}),
        ("def kernel(x):\n    return '{0}'.format(1)\n", set()),
        ("def kernel(x):\n    s = '{0.a}'\n    return s.format(x)\n", set()),
        ("def kernel(x):\n    return b'{0.a}'.format(x)\n", set()),
        ("s = '{x.y}'.strip()\n", set()),  # a string with a field, not formatted
        ("def kernel(x):\n    return vars(x)\n", {"interpreter_reach"}),
        ("def kernel(x):\n    return vars()\n", set()),  # the caller's locals, like locals(): no object's namespace
    ],
)
def test_calls_that_reach_the_interpreter(code: str, rules: set[str]) -> None:
    assert _rules(code) == rules


@pytest.mark.xfail(
    strict=True,
    reason="reported to the lead (issue 34): a module laundered through a container is "
    "judged as an object (its interpreter steps and private names pass), a star import binds names no "
    "rule sees, an identity read through a view (x.T._cdata) is no fingerprint, and any parameter "
    "named self takes computed names that start with a letter, a module included",
)
@pytest.mark.parametrize(
    "code",
    [
        T + "t = [torch][0]\nt.os.system('id')\n",
        T + "t = [torch][0]\nt.threading.Thread(target=print).start()\n",
        T + "c = getattr([torch][0], '_C')\n",
        "from os import *\nsystem('id')\n",
        T + "_C = {}\ndef kernel(x):\n    return _C.get(x.T._cdata)\n",
        T + "def reach(self, rest):\n    return getattr(self, 's' + rest)\nm = reach(torch, 'ys')\n",
    ],
)
def test_gaps_found_by_the_mutation_bench(code: str) -> None:
    assert _rules(code) != set()
