"""Hand-written ksearch solutions (candidate modules defining ``run``), shipped as text: read them with
``solution_source(name, language)``; they are never imported into the agent's process.

Language ``triton`` means a Python module evaluated as is (no CUDA build), so the MoE solution, plain PyTorch around
the reference's arithmetic, is filed under it; ``cuda`` means a module that builds CUDA with ``load_inline``. MLA
prefill has none: its reference, run as a candidate, is what the evaluator checks there."""

from __future__ import annotations

from importlib import resources

SOLUTIONS = {
    ("gqa_paged_decode_h32_kv4_d128_ps1", "triton"): "gqa_paged_decode_triton.py",
    ("gqa_paged_decode_h32_kv4_d128_ps1", "cuda"): "gqa_paged_decode_cuda.py",
    ("mla_paged_decode_h16_ckv512_kpe64_ps1", "triton"): "mla_paged_decode_triton.py",
    ("moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048", "triton"): "moe_fp8_block_scale_torch.py",
}


def solution_languages(definition: str) -> list[str]:
    return [language for (name, language) in SOLUTIONS if name == definition]


def solution_source(definition: str, language: str = "triton") -> str:
    """The solution for ``definition`` in ``language`` ('triton', or 'cuda': a load_inline module) as source text."""
    return resources.files(__package__).joinpath(SOLUTIONS[(definition, language)]).read_text(encoding="utf-8")
