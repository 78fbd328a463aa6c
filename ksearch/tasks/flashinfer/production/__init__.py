"""FlashInfer's own production kernels (flashinfer-python 0.7.4) behind each definition's ``run``: the baseline a user
compares against in production, timed by the evaluator as the harness's own baseline (``EvalRequest.harness_baseline``,
``ksearch.flows.baselines.measure_flashinfer_production``) beside the definition's reference and the shipped
solutions.

The modules are text, like ``solutions``: the evaluator's worker imports them, this package never does, and they import
``flashinfer`` only inside their functions, so ``import ksearch.tasks.flashinfer.production`` needs no flashinfer.
``flashinfer_unavailable()`` says in one line why flashinfer cannot be used here (not installed, or its import fails).

- GQA decode: ``BatchDecodeWithPagedKVCacheWrapper`` (NHD, tensor cores, ``plan`` then ``run`` with the base-2 LSE);
- MLA decode: ``BatchMLAPagedAttentionWrapper`` (``auto``: FA3 on SM90; CSR metadata, split layouts, base-2 LSE);
- MoE: ``trtllm_fp8_block_scale_moe`` on SM100 (needs the network for its kernel images), on SM90
  ``fused_topk_deepseek`` plus ``cutlass_fused_moe`` with the DeepSeek FP8 block scale (bf16 activations).

MLA prefill has none here.
"""

from __future__ import annotations

import importlib
from importlib import resources

FLASHINFER_VERSION = "0.7.4"
INSTALL_HINT = (
    f"pip install flashinfer-python=={FLASHINFER_VERSION} (offline: scripts/build_wheelhouse.sh --flashinfer, then "
    "scripts/install_flashinfer.sh on the GPU machine)"
)
PRODUCTION = {
    "gqa_paged_decode_h32_kv4_d128_ps1": "gqa_paged_decode.py",
    "mla_paged_decode_h16_ckv512_kpe64_ps1": "mla_paged_decode.py",
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048": "moe_fp8_block_scale.py",
}


def has_production(definition: str) -> bool:
    return definition in PRODUCTION


def production_source(definition: str) -> str:
    """The production module for ``definition`` as source text (a module defining ``run``)."""
    if definition not in PRODUCTION:
        raise KeyError(f"no FlashInfer production module for {definition!r}; there is one for {', '.join(PRODUCTION)}")
    return resources.files(__package__).joinpath(PRODUCTION[definition]).read_text(encoding="utf-8")


def flashinfer_unavailable() -> str | None:
    """None when ``flashinfer`` imports here, else one line saying why not and what to do. Another version than 0.7.4
    is used as it is: where its API differs, the evaluation fails and the bench prints its error."""
    try:
        module = importlib.import_module("flashinfer")
    except ModuleNotFoundError as exc:
        if exc.name == "flashinfer":
            return f"flashinfer is not installed: {INSTALL_HINT}"
        return f"flashinfer does not import: {exc.name} is missing ({INSTALL_HINT} brings its dependencies)"
    except Exception as exc:  # noqa: BLE001 - any failure of a third-party import is reported, never raised
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"flashinfer does not import: {type(exc).__name__}: {first}"[:300]
    del module
    return None
