"""FlashInfer's production GQA paged decode behind the definition's ``run`` (flashinfer-python 0.7.4).

``BatchDecodeWithPagedKVCacheWrapper`` with the NHD layout (the definition's caches are ``[num_pages, page_size,
num_kv_heads, head_dim]``, passed as the ``(k_cache, v_cache)`` pair), tensor cores on as serving engines set them for
a query group of 8, ``plan`` on the page table on every call (the definition's call is one batch step; a server plans
once per step and reuses the plan over its layers), then ``run`` with ``return_lse=True``: FlashInfer's log-sum-exp is
base 2 (``m + log2(d)``), as the definition's. The harness's own baseline, never a candidate.
"""

import torch

WORKSPACE_BYTES = 128 * 1024 * 1024
WRAPPER = []
"""The wrapper and its 128 MiB workspace, made on the first call and kept, as a server keeps it (one device per
process)."""


def decode_wrapper(device):
    import flashinfer

    if not WRAPPER:
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        WRAPPER.append(flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, kv_layout="NHD", use_tensor_cores=True))
    return WRAPPER[0]


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch_size, num_qo_heads, head_dim = q.shape
    page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    # Every request's last page is full: the definition counts pages of one token.
    last_page_len = torch.full((batch_size,), page_size, dtype=torch.int32, device=q.device)
    wrapper = decode_wrapper(q.device)
    wrapper.plan(
        kv_indptr,
        kv_indices,
        last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        page_size,
        pos_encoding_mode="NONE",
        q_data_type=q.dtype,
        kv_data_type=k_cache.dtype,
        sm_scale=float(sm_scale),
    )
    output, lse = wrapper.run(q, (k_cache, v_cache), return_lse=True)
    return output, lse
