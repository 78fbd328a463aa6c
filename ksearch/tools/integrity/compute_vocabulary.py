"""The words of the integrity rules about where a kernel's result comes from: the library operations a task forbids
and the calls allowed beside them (``library``), CUDA graphs and ``torch.compile`` (``streams``), tensor subclasses
and dispatch hooks (``streams``), and the fingerprints, caches and tensor attributes of output caching (``caching``).

Tables only, like ``vocabulary`` (which holds the rule names, ``matches`` and the words about the process); dotted
names are full import paths.
"""

from __future__ import annotations

ALLOWED_TORCH_CALLS = frozenset(
    {
        "torch.empty",
        "torch.empty_like",
        "torch.empty_strided",
        "torch.zeros",
        "torch.zeros_like",
        "torch.ones",
        "torch.ones_like",
        "torch.full",
        "torch.full_like",
        "torch.tensor",
        "torch.as_tensor",
        "torch.arange",
        "torch.device",
        "torch.Size",
        "torch.finfo",
        "torch.iinfo",
        "torch.is_tensor",
        "torch.no_grad",
        "torch.inference_mode",
        "torch.cuda.current_device",
        "torch.cuda.current_stream",
        "torch.cuda.default_stream",
        "torch.cuda.get_device_properties",
        "torch.cuda.get_device_capability",
        "torch.cuda.is_available",
        "torch.cuda.device",
        "torch.cuda.device_count",
        "torch.cuda.get_device_name",
        "torch.get_default_dtype",
    }
)
"""torch calls that allocate or describe, never compute: allowed even in an ``except`` handler."""
TASK_FORBIDDEN_CALLS: dict[str, tuple[str, ...]] = {
    "softmax": (
        "torch.softmax",
        "torch.log_softmax",
        "torch._softmax",
        "torch.special.softmax",
        "torch.special.log_softmax",
        "torch.nn.functional",
        "torch.nn.Softmax",
        "torch.nn.LogSoftmax",
        "torch.ops.aten",
        "torch._C._nn",
        "torch.sparse.softmax",
        ".softmax",
        ".log_softmax",
        "._softmax",
    ),
}
"""Per task: dotted prefixes of calls the spec forbids (a leading dot means a method of that name on anything). A task
may also declare ``forbidden_calls`` (same format) as a class attribute."""
GRAPH_CAPTURE = ("torch.cuda.graph", "torch.cuda.CUDAGraph")
"""CUDA graph capture a kernel may call directly (capture per shape, copy the input in, replay, copy the output out):
what a replay computes is judged at run time, where audited calls are checked like any kernel's. Referenced any
other way (held in a name the rules cannot follow, a container, a default argument) it is refused."""
COMPILE_APIS = ("torch.compile", "torch.compiler.compile")
"""``torch.compile`` under its public names: called directly with settings the rules read (``streams``)."""
COMPILER_PATCHES = ("torch._inductor.config.patch", "torch._dynamo.config.patch")
"""Settings patched for a block or a function: their keys and values are read like ``torch.compile``'s options."""
GRAPH_CALLS = (
    "torch.cuda.make_graphed_callables",
    "torch.cuda.graphs",
    "torch.cuda.graph_pool_handle",
    "triton.testing.do_bench_cudagraph",
    "torch._inductor.cudagraph",
    "torch.cuda._graph_pool_handle",
)
SUBCLASS_CALLS = (
    "torch.Tensor._make_subclass",
    "torch.Tensor._make_wrapper_subclass",
    "torch._C._TensorBase",
    "torch.utils._python_dispatch",
    "torch._C._disabled_torch_function_impl",
    "torch.overrides",
    "torch._subclasses",
    "torch.utils._pytree",
)
SUBCLASS_METHODS = frozenset({"_make_subclass", "_make_wrapper_subclass", "as_subclass"})
SUBCLASS_DEFS = frozenset({"__torch_function__", "__torch_dispatch__"})
TENSOR_BASES = (
    "torch.Tensor",
    "torch._C._TensorBase",
    "torch._C.TensorBase",
    "torch.nn.Parameter",
    "torch.nn.parameter.Parameter",
    "torch.nn.parameter.Buffer",
)
FINGERPRINT_CALLS = ("hashlib", "zlib.crc32", "zlib.adler32", "binascii.crc32", "xxhash", "pickle.dumps")
FINGERPRINT_METHODS = frozenset(
    {
        "data_ptr",
        "tobytes",
        "untyped_storage",
        "storage",
        "_cdata",
        "tolist",
        "item",
        "numpy",
        "__hash__",
        "_version",
        "storage_offset",
        "hexdigest",
        "digest",
    }
)
FINGERPRINT_BUILTINS = frozenset({"id", "hash", "bytes", "tuple", "frozenset"})
CACHE_DECORATORS = (
    "functools.lru_cache",
    "functools.cache",
    "functools.cached_property",
    "cachetools",
    "joblib.Memory",
)
CONTAINER_FACTORIES = (
    "dict",
    "list",
    "set",
    "collections.OrderedDict",
    "collections.defaultdict",
    "collections.deque",
    "weakref.WeakKeyDictionary",
    "weakref.WeakValueDictionary",
    "collections.ChainMap",
    "collections.Counter",
)
LIBRARY_METHODS = frozenset(
    {
        "softmax",
        "log_softmax",
        "matmul",
        "mm",
        "bmm",
        "addmm",
        "einsum",
        "conv1d",
        "conv2d",
        "conv3d",
        "exp",
        "sum",
        "mean",
        "amax",
        "max",
        "layer_norm",
        "linear",
        "relu",
        "sigmoid",
        "tanh",
        "gelu",
        "silu",
        "norm",
        "logsumexp",
        "baddbmm",
        "scaled_dot_product_attention",
        "forward",
        "reference",
        "softmax_reference",
    }
)
SHAPE_ATTRS = frozenset(
    {
        "shape",
        "size",
        "dtype",
        "device",
        "ndim",
        "dim",
        "numel",
        "nelement",
        "stride",
        "is_cuda",
        "is_contiguous",
        "element_size",
        "itemsize",
        "layout",
        "get",
        "keys",
        "items",
        "values",
        "__len__",
    }
)
"""Attributes that turn an input into a description of it (ints, dtypes, devices) or into a dict lookup: a name bound
through one of them is not an alias of the input tensor."""
TENSOR_ATTRS = frozenset(
    {
        "shape",
        "dtype",
        "device",
        "is_cuda",
        "contiguous",
        "view",
        "reshape",
        "stride",
        "data_ptr",
        "numel",
        "size",
        "float",
        "half",
        "to",
        "permute",
        "transpose",
        "clone",
        "cuda",
        "cpu",
        "ndim",
        "unsqueeze",
        "squeeze",
        "expand",
        "flatten",
        "t",
        "mT",
        "is_contiguous",
    }
)
"""Attributes only tensors have: a helper's parameter used through one of them holds a tensor (an int does not)."""
