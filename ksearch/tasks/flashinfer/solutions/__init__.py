"""Hand-written ksearch solutions (candidate modules defining ``run``), shipped as text: read them with
``solution_source(name)``; they are never imported into the agent's process."""

from __future__ import annotations

from importlib import resources

SOLUTIONS = {
    "gqa_paged_decode_h32_kv4_d128_ps1": "gqa_paged_decode_triton.py",
    "mla_paged_decode_h16_ckv512_kpe64_ps1": "mla_paged_decode_triton.py",
}


def solution_source(definition: str) -> str:
    """The Triton solution for ``definition`` as source text."""
    return resources.files(__package__).joinpath(SOLUTIONS[definition]).read_text(encoding="utf-8")
