"""Tensors the candidate made or touched, read by the harness through torch's own implementations only.

A plain ``torch.Tensor`` can carry attributes of its own: a kernel that sets ``out.detach`` to a closure and returns
zeros gets its closure run by a harness that stages the output with ``out.detach()``, after the end event, where the
closure can compute the right answer unseen (issue 59). So the harness never looks a method or a property up on a
tensor that came from the candidate (its outputs, and its inputs once it held them): every read goes through the
C implementations of ``torch._C.TensorBase``, taken when this module is imported (the worker imports it before the
candidate), with the tensor as their first argument, and an instance dictionary or a subclass is seen for what it is
(``own_attributes``, ``is_plain``). The functions below are the only way the worker and the checker's shared code
(``seeds.input_digest``) read such tensors.

(Global interception is another matter: a torch function or dispatch mode pushed by the candidate would see every
call of every torch function. Defining one is refused statically, and ``modes_active`` lets the worker check that
none is active where it reads the candidate's tensors.)
"""

from __future__ import annotations

from typing import Any

import torch

_BASE = vars(torch._C.TensorBase)
_PLAIN: type = torch.Tensor
_TYPE = type
_MRO = vars(type)["__mro__"].__get__
_QUALNAME = vars(type)["__qualname__"].__get__
TENSOR_MEMBERS = frozenset(dir(torch.Tensor))
"""Every name ``torch.Tensor`` answers for, as imported (before the candidate)."""
_INSTANCE_DICT = vars(torch.Tensor)["__dict__"].__get__
_TUPLE = tuple
_DICT = dict
_STR = str
_KEYS = dict.keys
_STR_COPY = vars(str)["__str__"]
"""``str``'s own ``__str__``: an exact ``str`` with the characters of a ``str`` subclass, running none of its code."""
_SHAPE = _BASE["shape"].__get__
_DTYPE = _BASE["dtype"].__get__
_DEVICE = _BASE["device"].__get__
_DATA = _BASE["data"].__get__
_STRIDE = _BASE["stride"]
_NUMEL = _BASE["numel"]
_ELEMENT_SIZE = _BASE["element_size"]
_DETACH = _BASE["detach"]
_COPY = _BASE["copy_"]
_CLONE = _BASE["clone"]
_CONTIGUOUS = _BASE["contiguous"]
_RESHAPE = _BASE["reshape"]
_VIEW = _BASE["view"]
_TO = _BASE["to"]
_FILL = _BASE["fill_"]
_STORAGE = _BASE["untyped_storage"]
_STORAGE_NBYTES = vars(torch._C.StorageBase)["nbytes"]
_DATA_PTR = _BASE["data_ptr"]
_IS_FLOATING = _BASE["is_floating_point"]
_IS_COMPLEX = _BASE["is_complex"]
_EQUAL = torch.equal
_ISNAN = torch.isnan
_EQ = torch.eq
_LOGICAL_NOT = torch.logical_not
_LOGICAL_OR = torch.logical_or
_LOGICAL_AND = torch.logical_and
_COUNT = torch.count_nonzero
_EMPTY_STRIDED = torch.empty_strided
_EMPTY = torch.empty
_GETITEM = _BASE["__getitem__"]
_CAT = torch.cat
_NUMPY = _BASE["numpy"]
_IS_TF_MODE = getattr(torch._C, "_is_torch_function_mode_enabled", None)
_DISPATCH_DEPTH = getattr(torch._C, "_len_torch_dispatch_stack", None)


def is_tensor(value: Any) -> bool:
    """``value`` is a ``torch.Tensor`` or a subclass (read from its type's MRO by identity: no ``__instancecheck__``,
    and no metaclass ``__eq__``, which ``in`` would ask, runs)."""
    return any(kind is _PLAIN for kind in _MRO(_TYPE(value)))


def is_tuple(value: Any) -> bool:
    """``value``'s type is exactly ``tuple``."""
    return _TYPE(value) is _TUPLE


def type_name(value: Any) -> str:
    """The qualified name of ``value``'s type, read without any metaclass of the candidate's running."""
    return _QUALNAME(_TYPE(value))


def is_plain(value: Any) -> bool:
    """``value``'s type is exactly ``torch.Tensor``."""
    return _TYPE(value) is _PLAIN


def own_attributes(tensor: Any) -> list[str]:
    """The names in a plain tensor's instance dictionary (an honest tensor has none), each exactly a ``str``: a key of
    another type is shown as its type's name in angle brackets, and a dictionary that is not exactly a ``dict`` as
    ``__dict__``. Read with ``dict``'s and ``str``'s own methods, so no key's ``__hash__`` or ``__eq__`` runs."""
    namespace = _INSTANCE_DICT(tensor)
    if _TYPE(namespace) is not _DICT:
        return ["__dict__"]
    return [_name_text(name) for name in _KEYS(namespace)]


def _name_text(name: Any) -> str:
    """A key of an instance dictionary as an exact ``str`` (a ``str`` subclass copied by ``str``'s own method, any
    other key as its type's name in angle brackets)."""
    if any(kind is _STR for kind in _MRO(_TYPE(name))):
        return _STR_COPY(name)
    return f"<{type_name(name)}>"


def shadowing_attributes(tensor: Any) -> list[str]:
    """The names in a plain tensor's instance dictionary that shadow a member of ``torch.Tensor`` (a method or a
    property a harness looking names up would have run), and any name that is not exactly a ``str`` or a
    dictionary that is not exactly a ``dict`` (no honest tensor has either). Markers torch itself sets on a tensor it
    is given (``torch._dynamo.mark_dynamic``'s ``_dynamo_dynamic_indices``) shadow nothing."""
    namespace = _INSTANCE_DICT(tensor)
    if _TYPE(namespace) is not _DICT:
        return ["__dict__"]
    names = []
    for name in _KEYS(namespace):
        if _TYPE(name) is not _STR:
            names.append(_name_text(name))
        elif name in TENSOR_MEMBERS:
            names.append(name)
    return names


def shape(tensor: Any) -> tuple[int, ...]:
    return _TUPLE(_SHAPE(tensor))


def dtype(tensor: Any) -> torch.dtype:
    return _DTYPE(tensor)


def device(tensor: Any) -> torch.device:
    return _DEVICE(tensor)


def stride(tensor: Any) -> tuple[int, ...]:
    return _TUPLE(_STRIDE(tensor))


def numel(tensor: Any) -> int:
    return _NUMEL(tensor)


def nbytes(tensor: Any) -> int:
    return _NUMEL(tensor) * _ELEMENT_SIZE(tensor)


def detach(tensor: Any) -> torch.Tensor:
    return _DETACH(tensor)


def data(tensor: Any) -> torch.Tensor:
    """``tensor.data``: a new tensor object over the same memory (its version counter is not bumped by writes)."""
    return _DATA(tensor)


def copy_into(target: Any, source: Any, *, non_blocking: bool = False) -> None:
    _COPY(target, source, non_blocking=non_blocking)


def clone(tensor: Any) -> torch.Tensor:
    return _CLONE(_DETACH(tensor))


def contiguous(tensor: Any) -> torch.Tensor:
    return _CONTIGUOUS(tensor)


def reshape(tensor: Any, *size: int) -> torch.Tensor:
    return _RESHAPE(tensor, size)


def view(tensor: Any, like: Any) -> torch.Tensor:
    """``tensor.view(dtype)`` or ``tensor.view(shape)``."""
    return _VIEW(tensor, like)


def to(tensor: Any, target: Any) -> torch.Tensor:
    return _TO(tensor, target)


def fill(tensor: Any, value: Any) -> None:
    _FILL(tensor, value)


def has_storage(tensor: Any) -> bool:
    """A real allocation behind the tensor (an empty one needs none)."""
    try:
        return _NUMEL(tensor) == 0 or (_STORAGE_NBYTES(_STORAGE(tensor)) > 0 and _DATA_PTR(tensor) != 0)
    except Exception:  # noqa: BLE001 - no storage at all (a meta or functional tensor)
        return False


def is_floating(tensor: Any) -> bool:
    return _IS_FLOATING(tensor) or _IS_COMPLEX(tensor)


def every(tensor: Any, step: int) -> torch.Tensor:
    """``tensor[::step]`` (of a one-dimensional tensor)."""
    return _GETITEM(tensor, slice(None, None, step))


def typed_view(buffer: Any, offset: int, dtype_: torch.dtype, size: tuple[int, ...]) -> torch.Tensor:
    """The bytes of a ``uint8`` buffer from ``offset`` viewed as a tensor of ``dtype_`` and shape ``size``."""
    count = 1
    for extent in size:
        count *= extent
    length = count * dtype_.itemsize
    return _VIEW(_VIEW(_GETITEM(buffer, slice(offset, offset + length)), dtype_), size)


def host_bytes(tensors: list[Any]) -> bytes:
    """The bytes of one-dimensional ``uint8`` tensors of one device, concatenated and copied to the host."""
    return _NUMPY(_TO(_CAT(tensors), "cpu")).tobytes()


def empty(size: tuple[int, ...], dtype_: torch.dtype, device_: Any) -> torch.Tensor:
    return _EMPTY(size, dtype=dtype_, device=device_)


def empty_strided(size: tuple[int, ...], strides: tuple[int, ...], dtype_: torch.dtype, device_: Any) -> torch.Tensor:
    return _EMPTY_STRIDED(size, strides, dtype=dtype_, device=device_)


def changed_elements(now: Any, before: Any) -> int:
    """How many elements of ``now`` differ from ``before`` bit for bit (NaN equals NaN); 0 when they are equal."""
    if _EQUAL(now, before):
        return 0
    same = _EQ(now, before)
    if is_floating(now):
        same = _LOGICAL_OR(same, _LOGICAL_AND(_ISNAN(now), _ISNAN(before)))
    return int(_COUNT(_LOGICAL_NOT(same)))


def modes_active() -> bool:
    """A torch function mode or a dispatch mode is active: every torch call would run code of whoever pushed it."""
    function_mode = bool(_IS_TF_MODE()) if _IS_TF_MODE is not None else False
    dispatch_depth = int(_DISPATCH_DEPTH()) if _DISPATCH_DEPTH is not None else 0
    return function_mode or dispatch_depth > 0
