"""The four FlashInfer-Bench definitions ksearch ships, and loading definitions through flashinfer-bench's own model.

The JSON files under ``definitions/`` were written for ksearch from the published schema facts of flashinfer-bench
0.1.2 (names, axes, dtypes, semantics); their ``reference`` sources are ksearch's own. They are parsed with
``flashinfer_bench.Definition`` so that any schema drift shows up as a validation error, not a silent difference.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from ksearch.errors import UserError

INSTALL_HINT = "pip install --no-deps flashinfer-bench==0.1.2 && pip install docstring-parser safetensors"

MLA_DECODE = "mla_paged_decode_h16_ckv512_kpe64_ps1"
GQA_DECODE = "gqa_paged_decode_h32_kv4_d128_ps1"
MLA_PREFILL = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
BUILTIN_DEFINITIONS = (MLA_DECODE, GQA_DECODE, MLA_PREFILL, MOE)


class FlashInferError(UserError):
    """A FlashInfer-Bench definition, dataset or solution cannot be used."""


def fib() -> Any:
    """The ``flashinfer_bench`` module, or a FlashInferError naming the install line."""
    try:
        import flashinfer_bench
    except ImportError as exc:
        raise FlashInferError(
            f"flashinfer-bench is not importable ({exc})", hint=f"install it without its heavy dependencies: {INSTALL_HINT}"
        ) from exc
    return flashinfer_bench


def builtin_definition_json(name: str) -> str:
    """The JSON text of a built-in definition."""
    if name not in BUILTIN_DEFINITIONS:
        known = ", ".join(BUILTIN_DEFINITIONS)
        raise FlashInferError(
            f"no built-in FlashInfer-Bench definition {name!r}; built in: {known}",
            hint="other definitions need a dataset: flashinfer:<definition>@/path/to/flashinfer-trace",
        )
    return resources.files(__package__).joinpath("definitions", f"{name}.json").read_text(encoding="utf-8")


def load_builtin_definition(name: str) -> Any:
    """A built-in definition as a ``flashinfer_bench.Definition``."""
    return fib().Definition.model_validate_json(builtin_definition_json(name))
