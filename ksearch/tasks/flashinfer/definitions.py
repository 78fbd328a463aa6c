"""The four FlashInfer-Bench definitions ksearch ships, and loading definitions through flashinfer-bench's own model.

The JSON files under ``definitions/`` were written for ksearch from the published schema facts of flashinfer-bench
0.1.2 (names, axes, dtypes, semantics); their ``reference`` sources are ksearch's own. They are parsed with
``flashinfer_bench.Definition`` so that any schema drift shows up as a validation error, not a silent difference.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from ksearch.errors import UserError
from ksearch.tasks.base import InputRole

INSTALL_HINT = "pip install --no-deps flashinfer-bench==0.1.2 && pip install docstring-parser safetensors"

MLA_DECODE = "mla_paged_decode_h16_ckv512_kpe64_ps1"
GQA_DECODE = "gqa_paged_decode_h32_kv4_d128_ps1"
MLA_PREFILL = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
BUILTIN_DEFINITIONS = (MLA_DECODE, GQA_DECODE, MLA_PREFILL, MOE)


_A, _S, _P = InputRole.ACTIVATION, InputRole.STRUCTURE, InputRole.PARAMETER
BUILTIN_INPUT_ROLES: dict[str, dict[str, InputRole]] = {
    GQA_DECODE: {"q": _A, "k_cache": _A, "v_cache": _A, "kv_indptr": _S, "kv_indices": _S, "sm_scale": _P},
    MLA_DECODE: {
        "q_nope": _A,
        "q_pe": _A,
        "ckv_cache": _A,
        "kpe_cache": _A,
        "kv_indptr": _S,
        "kv_indices": _S,
        "sm_scale": _P,
    },
    MLA_PREFILL: {
        "q_nope": _A,
        "q_pe": _A,
        "ckv_cache": _A,
        "kpe_cache": _A,
        "qo_indptr": _S,
        "kv_indptr": _S,
        "kv_indices": _S,
        "sm_scale": _P,
    },
    MOE: {
        "routing_logits": _A,
        "routing_bias": _P,
        "hidden_states": _A,
        "hidden_states_scale": _A,
        "gemm1_weights": _P,
        "gemm1_weights_scale": _P,
        "gemm2_weights": _P,
        "gemm2_weights_scale": _P,
        "local_expert_offset": _P,
        "routed_scaling_factor": _P,
    },
}
"""Each built-in definition's inputs by role (``InputRole``): the queries and KV caches change from call to call
(from layer to layer); the page tables and lengths are the batch's structure; the MoE weights, their block scales,
the routing bias and every scalar are parameters. The MoE activations' block scales change with the activations."""


def input_role(definition: str, name: str, dtype: str, shape: list[str] | None) -> InputRole:
    """The role of one input: from ``BUILTIN_INPUT_ROLES`` for the built-in definitions, else by kind for a
    dataset's definition: scalars are parameters, integer tensors structure, float tensors named like a weight or a
    bias parameters, every other float tensor an activation."""
    declared = BUILTIN_INPUT_ROLES.get(definition, {}).get(name)
    if declared is not None:
        return declared
    if shape is None:
        return _P
    if not str(dtype).startswith(("float", "bfloat")):
        return _S
    return _P if "weight" in name or name.endswith("bias") else _A


class FlashInferError(UserError):
    """A FlashInfer-Bench definition, dataset or solution cannot be used."""


def fib() -> Any:
    """The ``flashinfer_bench`` module, or a FlashInferError naming the install line."""
    try:
        import flashinfer_bench
    except ImportError as exc:
        raise FlashInferError(
            f"flashinfer-bench is not importable ({exc})",
            hint=f"install it without its heavy dependencies: {INSTALL_HINT}",
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
