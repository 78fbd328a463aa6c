"""FlashInfer's production MLA paged decode behind the definition's ``run`` (flashinfer-python 0.7.4).

``BatchMLAPagedAttentionWrapper`` (backend ``auto``: FA3 on an H100, FA2 where FA3 cannot plan), planned on every call
from the CSR page table (``MLAPlanMetadata.csr``: one query token per request, KV lengths from ``kv_indptr``), with
split query and cache layouts (the definition's ``q_nope``/``q_pe`` and ``ckv_cache``/``kpe_cache`` are separate
tensors, ``[num_pages, page_size, dim]``), not causal, and base-2 log-sum-exp as the definition's; then ``run`` with
``return_lse=True``. The harness's own baseline, never a candidate.
"""

import torch

WORKSPACE_BYTES = 128 * 1024 * 1024
WRAPPER = []
"""The wrapper and its 128 MiB workspace, made on the first call and kept, as a server keeps it (one device per
process)."""


def mla_wrapper(device):
    import flashinfer

    if not WRAPPER:
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        WRAPPER.append(flashinfer.BatchMLAPagedAttentionWrapper(workspace, backend="auto"))
    return WRAPPER[0]


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    import flashinfer

    batch_size, num_heads, head_dim_ckv = q_nope.shape
    head_dim_kpe = q_pe.shape[-1]
    page_size = ckv_cache.shape[1]
    device = q_nope.device
    qo_indptr = torch.arange(batch_size + 1, dtype=torch.int32, device=device)
    # Tokens per request: its pages times the page size (every page is full in the definition's page size of 1).
    kv_lens = (kv_indptr[1:] - kv_indptr[:-1]) * page_size
    wrapper = mla_wrapper(device)
    wrapper.plan(
        metadata=flashinfer.mla.MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_lens),
        num_heads=num_heads,
        head_dim_ckv=head_dim_ckv,
        head_dim_kpe=head_dim_kpe,
        page_size=page_size,
        causal=False,
        sm_scale=float(sm_scale),
        q_data_type=q_nope.dtype,
        kv_data_type=ckv_cache.dtype,
        query_layout="split",
        kv_cache_layout="split",
        lse_mode="base2",
    )
    output, lse = wrapper.run(query=(q_nope, q_pe), kv_cache=(ckv_cache, kpe_cache), return_lse=True)
    return output, lse
