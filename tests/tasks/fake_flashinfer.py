"""A stand-in for ``flashinfer`` (flashinfer-python 0.7.4) that records each call, refuses the arguments the real API
refuses (as read from its source: decode.py's ``BatchDecodeWithPagedKVCacheWrapper``, mla/_batch_mla's
``BatchMLAPagedAttentionWrapper`` and ``MLAPlanMetadata``, fused_moe/core.py's ``cutlass_fused_moe`` and
``trtllm_fp8_block_scale_moe``, fused_moe/fused_routing_dsv3.py's ``fused_topk_deepseek``), and computes what each call
is documented to compute, in float32 on the CPU, so a production module's mapping can be checked against the
definition's reference without a GPU. It knows nothing of the definitions: only of the API."""

from __future__ import annotations

import math
import types
from dataclasses import dataclass
from typing import Any

import torch

LOG2E = 1.0 / math.log(2.0)


class ApiMisuse(AssertionError):
    """An argument the real flashinfer would refuse or misread."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ApiMisuse(message)


def _int32_vector(tensor: Any, name: str, length: int | None = None) -> None:
    expect(isinstance(tensor, torch.Tensor) and tensor.dtype == torch.int32 and tensor.dim() == 1, f"{name}: int32 1-D")
    if length is not None:
        expect(tensor.numel() == length, f"{name}: {tensor.numel()} entries, expected {length}")


def _workspace(buffer: Any) -> None:
    expect(isinstance(buffer, torch.Tensor) and buffer.dtype == torch.uint8 and buffer.dim() == 1, "workspace: uint8")
    expect(buffer.numel() >= 8 * 1024 * 1024, "workspace: at least the 8 MiB flashinfer plans with")


def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, sm_scale: float) -> tuple[Any, Any]:
    """One request: q [heads, d], keys/values [len, heads, d] -> (out [heads, dv], base-2 lse [heads])."""
    logits = torch.einsum("hd,lhd->hl", q.float(), keys.float()) * sm_scale
    lse = torch.logsumexp(logits, dim=-1) * LOG2E
    return torch.einsum("hl,lhd->hd", torch.softmax(logits, dim=-1), values.float()), lse


class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(
        self, float_workspace_buffer: Any, kv_layout: str = "NHD", use_tensor_cores: bool = False, **rest: Any
    ):
        _workspace(float_workspace_buffer)
        expect(kv_layout in ("NHD", "HND"), f"kv_layout {kv_layout!r}")
        expect(not rest.get("use_cuda_graph"), "CUDA graphs need caller buffers")
        self.kv_layout, self.use_tensor_cores, self.calls, self.plan_args = kv_layout, use_tensor_cores, [], None
        CALLS.append(("BatchDecodeWithPagedKVCacheWrapper", kv_layout, use_tensor_cores))

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, *extra, **kw):
        expect(not extra, "options after page_size are keyword-only (positional ones are deprecated)")
        batch = last_page_len.numel()
        _int32_vector(indptr, "indptr", batch + 1)
        _int32_vector(last_page_len, "last_page_len", batch)
        _int32_vector(indices, "indices", int(indptr[-1]))
        expect(bool(((last_page_len >= 1) & (last_page_len <= page_size)).all()), "1 <= last_page_len <= page_size")
        expect(num_qo_heads % num_kv_heads == 0, "num_qo_heads must be a multiple of num_kv_heads")
        expect(kw.get("pos_encoding_mode", "NONE") == "NONE", "no RoPE in the definition")
        expect(isinstance(kw.get("sm_scale"), float), "sm_scale: a Python float (else 1/sqrt(head_dim))")
        expect(kw.get("q_data_type") is not None, "q_data_type defaults to float16")
        self.plan_args = dict(
            indptr=indptr.tolist(),
            indices=indices.long(),
            last=last_page_len.tolist(),
            heads=(num_qo_heads, num_kv_heads, head_dim),
            page_size=page_size,
            **kw,
        )
        CALLS.append(("decode.plan", self.plan_args["heads"], page_size, kw["q_data_type"], kw.get("kv_data_type")))

    def run(self, q, paged_kv_cache, *extra, return_lse=False, **kw):
        expect(self.plan_args is not None, "run() before plan()")
        expect(not extra and not kw, f"unexpected run arguments {extra} {sorted(kw)}")
        plan = self.plan_args
        qo_heads, kv_heads, head_dim = plan["heads"]
        expect(isinstance(paged_kv_cache, tuple) and len(paged_kv_cache) == 2, "paged_kv_cache: the (k, v) pair")
        k_cache, v_cache = paged_kv_cache
        page_size = plan["page_size"]
        want = (page_size, kv_heads, head_dim) if self.kv_layout == "NHD" else (kv_heads, page_size, head_dim)
        for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
            expect(cache.dim() == 4 and tuple(cache.shape[1:]) == want, f"{name} {tuple(cache.shape)}: {want} per page")
            expect(cache.dtype == (plan.get("kv_data_type") or plan["q_data_type"]), f"{name} dtype")
        batch = len(plan["last"])
        expect(tuple(q.shape) == (batch, qo_heads, head_dim) and q.dtype == plan["q_data_type"], "q shape/dtype")
        out = torch.zeros(batch, qo_heads, head_dim, dtype=q.dtype)
        lse = torch.full((batch, qo_heads), -math.inf)
        group = qo_heads // kv_heads
        for b in range(batch):
            pages = plan["indices"][plan["indptr"][b] : plan["indptr"][b + 1]]
            if pages.numel() == 0:
                continue
            length = (pages.numel() - 1) * page_size + plan["last"][b]
            keys = k_cache[pages].reshape(-1, kv_heads, head_dim)[:length].repeat_interleave(group, dim=1)
            values = v_cache[pages].reshape(-1, kv_heads, head_dim)[:length].repeat_interleave(group, dim=1)
            o, lse[b] = _attend(q[b], keys, values, plan["sm_scale"])
            out[b] = o.to(q.dtype)
        CALLS.append(("decode.run", return_lse))
        return (out, lse) if return_lse else out


@dataclass(frozen=True)
class MLAPlanMetadata:
    qo_indptr: Any = None
    kv_indptr: Any = None
    kv_indices: Any = None
    kv_len_arr: Any = None

    @classmethod
    def csr(cls, qo_indptr: Any, kv_indptr: Any, kv_indices: Any, kv_len_arr: Any) -> MLAPlanMetadata:
        return cls(qo_indptr, kv_indptr, kv_indices, kv_len_arr)


MLA_PLAN_KEYS = {
    "metadata",
    "num_heads",
    "head_dim_ckv",
    "head_dim_kpe",
    "page_size",
    "causal",
    "sm_scale",
    "q_data_type",
    "kv_data_type",
    "query_layout",
    "kv_cache_layout",
    "lse_mode",
}


class BatchMLAPagedAttentionWrapper:
    def __init__(self, float_workspace_buffer: Any, use_cuda_graph: bool = False, backend: str = "auto", **rest: Any):
        _workspace(float_workspace_buffer)
        expect(backend in ("auto", "fa2", "fa3"), f"backend {backend!r}")
        expect(not use_cuda_graph and not rest, "no CUDA graph buffers")
        self.plan_args: dict[str, Any] | None = None
        CALLS.append(("BatchMLAPagedAttentionWrapper", backend))

    def plan(self, *args: Any, **kw: Any) -> None:
        expect(not args, "plan() arguments are keyword-only (positional ones are deprecated)")
        expect(set(kw) <= MLA_PLAN_KEYS and "metadata" in kw, f"plan() keywords {sorted(kw)}")
        meta = kw["metadata"]
        expect(isinstance(meta, MLAPlanMetadata), "metadata: an MLAPlanMetadata")
        batch = meta.kv_len_arr.numel()
        _int32_vector(meta.qo_indptr, "qo_indptr", batch + 1)
        _int32_vector(meta.kv_indptr, "kv_indptr", batch + 1)
        _int32_vector(meta.kv_len_arr, "kv_len_arr", batch)
        _int32_vector(meta.kv_indices, "kv_indices", int(meta.kv_indptr[-1]))
        expect(kw["q_data_type"] in (torch.float16, torch.bfloat16), "FA MLA: fp16/bf16 queries")
        expect(kw["kv_data_type"] == kw["q_data_type"], "non-fp8 KV dtype must match the query's")
        expect(kw["head_dim_ckv"] % 128 == 0 and kw["head_dim_kpe"] % 64 == 0, "FA MLA head dims")
        expect(kw.get("lse_mode", "none") in ("none", "base2", "basee"), "lse_mode")
        expect(isinstance(kw["sm_scale"], float) and isinstance(kw["causal"], bool), "sm_scale float, causal bool")
        self.plan_args = kw
        CALLS.append(("mla.plan", kw.get("query_layout"), kw.get("kv_cache_layout"), kw.get("lse_mode"), kw["causal"]))

    def run(self, *args: Any, query: Any = None, kv_cache: Any = None, return_lse: bool = False, **kw: Any) -> Any:
        expect(self.plan_args is not None, "run() before plan()")
        expect(not args and not kw, "run() takes query= and kv_cache= (the separate tensors are deprecated)")
        plan = self.plan_args
        meta = plan["metadata"]
        expect(not return_lse or plan.get("lse_mode", "none") != "none", "return_lse needs an LSE-enabled plan")
        ckv, kpe = plan["head_dim_ckv"], plan["head_dim_kpe"]
        if plan.get("query_layout", "packed") == "split":
            expect(isinstance(query, tuple) and len(query) == 2, "split query: (q_nope, q_pe)")
            q_nope, q_pe = query
        else:
            expect(isinstance(query, torch.Tensor) and query.shape[-1] == ckv + kpe, "packed query")
            q_nope, q_pe = query[..., :ckv], query[..., ckv:]
        if plan.get("kv_cache_layout", "packed") == "split":
            expect(isinstance(kv_cache, tuple) and len(kv_cache) == 2, "split cache: (ckv_cache, kpe_cache)")
            ckv_cache, kpe_cache = kv_cache
        else:
            ckv_cache, kpe_cache = kv_cache[..., :ckv], kv_cache[..., ckv:]
        batch, heads = meta.kv_len_arr.numel(), plan["num_heads"]
        expect(tuple(q_nope.shape) == (batch, heads, ckv) and tuple(q_pe.shape) == (batch, heads, kpe), "query shape")
        expect(ckv_cache.dim() == 3 and ckv_cache.shape[1:] == (plan["page_size"], ckv), "ckv_cache [pages, ps, ckv]")
        expect(kpe_cache.dim() == 3 and kpe_cache.shape[1:] == (plan["page_size"], kpe), "kpe_cache [pages, ps, kpe]")
        out = torch.zeros(batch, heads, ckv, dtype=q_nope.dtype)
        lse = torch.full((batch, heads), -math.inf)
        indptr, indices = meta.kv_indptr.tolist(), meta.kv_indices.long()
        for b in range(batch):
            pages = indices[indptr[b] : indptr[b + 1]]
            length = int(meta.kv_len_arr[b])
            if length == 0:
                continue
            keys_c = ckv_cache[pages].reshape(-1, ckv)[:length]
            keys_p = kpe_cache[pages].reshape(-1, kpe)[:length]
            logits = (q_nope[b].float() @ keys_c.float().T + q_pe[b].float() @ keys_p.float().T) * plan["sm_scale"]
            lse[b] = torch.logsumexp(logits, dim=-1) * (LOG2E if plan["lse_mode"] == "base2" else 1.0)
            out[b] = (torch.softmax(logits, dim=-1) @ keys_c.float()).to(q_nope.dtype)
        CALLS.append(("mla.run", return_lse))
        return (out, lse) if return_lse else out


# -- MoE --------------------------------------------------------------------------------------------------------------
def _route(logits: torch.Tensor, bias: torch.Tensor, n_group: int, topk_group: int, topk: int, scaling: float) -> Any:
    """fused_topk_deepseek's documented steps 1-5 (and the trtllm DeepSeekV3 routing method)."""
    scores = torch.sigmoid(logits.float())
    biased = scores + bias.float()
    tokens, experts = scores.shape
    groups = biased.view(tokens, n_group, experts // n_group).topk(2, dim=-1).values.sum(-1)
    keep = torch.zeros_like(groups).scatter_(1, groups.topk(topk_group, dim=-1).indices, 1.0)
    keep = keep.repeat_interleave(experts // n_group, dim=1) > 0
    chosen = biased.masked_fill(~keep, -math.inf).topk(topk, dim=-1).indices
    weights = scores.gather(1, chosen)
    return weights / weights.sum(-1, keepdim=True) * scaling, chosen.to(torch.int32)


def _blocks(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    return scale.repeat_interleave(128, dim=0)[:rows].repeat_interleave(128, dim=1)[:, :cols]


def _experts(x: torch.Tensor, chosen: Any, weights: Any, w1: Any, s1: Any, w2: Any, s2: Any, first: int) -> Any:
    """Sum over the local experts [first, first + E) of weight * (SwiGLU(x W1^T) W2^T); SwiGLU = silu(gate) * linear
    with the linear half first (cutlass_fused_moe_kernels.cuh: linear at elem_index, gate at + inter_size)."""
    local, gemm1_out, hidden = w1.shape
    inter = gemm1_out // 2
    out = torch.zeros(x.shape[0], hidden)
    for e in range(local):
        hit = chosen == first + e
        rows = hit.any(-1).nonzero().squeeze(-1)
        if rows.numel() == 0:
            continue
        h = x[rows] @ (w1[e].float() * _blocks(s1[e], gemm1_out, hidden)).T
        act = torch.nn.functional.silu(h[:, inter:]) * h[:, :inter]
        y = act @ (w2[e].float() * _blocks(s2[e], hidden, inter)).T
        out.index_add_(0, rows, y * (weights * hit).sum(-1)[rows, None])
    return out


def fused_topk_deepseek(scores, bias, n_group, topk_group, topk, routed_scaling_factor, topk_values, topk_indices, *a):
    expect(not a, "launch_with_pdl and routing_replay_out are left to their defaults")
    expect(all(t.is_contiguous() for t in (scores, bias, topk_values, topk_indices)), "contiguous tensors")
    expect(bias.dtype == scores.dtype and topk_values.dtype == scores.dtype, "bias and topk_values: scores' dtype")
    expect(topk_indices.dtype == torch.int32, "topk_indices: int32")
    expect(tuple(topk_values.shape) == (scores.shape[0], topk) == tuple(topk_indices.shape), "(num_tokens, topk)")
    expect(topk <= 8 and scores.shape[1] // n_group <= 32 and topk_group <= n_group, "kernel limits")
    expect(isinstance(routed_scaling_factor, float), "routed_scaling_factor: float")
    weights, chosen = _route(scores, bias, n_group, topk_group, topk, routed_scaling_factor)
    topk_values.copy_(weights.to(topk_values.dtype))
    topk_indices.copy_(chosen)
    CALLS.append(("fused_topk_deepseek", n_group, topk_group, topk))


def cutlass_fused_moe(
    input,
    token_selected_experts,
    token_final_scales,
    fc1_expert_weights,
    fc2_expert_weights,
    output_dtype,
    quant_scales,
    *extra,
    ep_size=1,
    ep_rank=0,
    use_deepseek_fp8_block_scale=False,
    **kw,
):
    expect(not extra and not kw, f"unexpected arguments {sorted(kw)}")
    expect(use_deepseek_fp8_block_scale, "fp8 block-scale weights need use_deepseek_fp8_block_scale=True")
    # The DeepSeek FP8 runner is CutlassMoeFCRunner<bf16, fp8>: bf16 activations, quantised by the kernel.
    expect(input.dtype == torch.bfloat16, f"input {input.dtype}: the DeepSeek FP8 block-scale path takes bf16")
    expect(fc1_expert_weights.dtype == fc2_expert_weights.dtype == torch.float8_e4m3fn, "fp8 e4m3 weights")
    local, gemm1_out, hidden = fc1_expert_weights.shape
    expect(tuple(fc2_expert_weights.shape) == (local, hidden, gemm1_out // 2), "fc2 [E, hidden, inter]")
    expect(isinstance(quant_scales, list) and len(quant_scales) == 2, "quant_scales: [fc1 scales, fc2 scales]")
    s1, s2 = quant_scales
    expect(tuple(s1.shape) == (local, gemm1_out // 128, hidden // 128) and s1.dtype == torch.float32, "fc1 scales")
    expect(tuple(s2.shape) == (local, hidden // 128, gemm1_out // 256) and s2.dtype == torch.float32, "fc2 scales")
    expect(token_selected_experts.dtype == torch.int32 and token_final_scales.dtype == torch.float32, "routing dtypes")
    expect(0 <= ep_rank < ep_size, "ep_rank in [0, ep_size)")
    out = _experts(
        input.float(),
        token_selected_experts,
        token_final_scales,
        fc1_expert_weights,
        s1,
        fc2_expert_weights,
        s2,
        ep_rank * local,
    )
    CALLS.append(("cutlass_fused_moe", ep_size, ep_rank, output_dtype))
    return out.to(output_dtype)


def trtllm_fp8_block_scale_moe(
    routing_logits,
    routing_bias,
    hidden_states,
    hidden_states_scale,
    gemm1_weights,
    gemm1_weights_scale,
    gemm2_weights,
    gemm2_weights_scale,
    num_experts,
    top_k,
    n_group,
    topk_group,
    intermediate_size,
    local_expert_offset,
    local_num_experts,
    routed_scaling_factor,
    *extra,
    routing_method_type=0,
    use_shuffled_weight=False,
    weight_layout=0,
    **kw,
):
    expect(not extra and not kw, f"unexpected arguments {sorted(kw)}")
    expect(routing_method_type == 2, "DeepSeekV3 routing is RoutingMethodType 2")
    expect(not use_shuffled_weight and weight_layout == 0, "unshuffled MajorK weights")
    tokens, hidden = hidden_states.shape
    expect(hidden_states.dtype == torch.float8_e4m3fn, "fp8 activations")
    expect(tuple(hidden_states_scale.shape) == (hidden // 128, tokens), "hidden_states_scale [hidden/128, seq_len]")
    expect(tuple(gemm1_weights.shape) == (local_num_experts, 2 * intermediate_size, hidden), "gemm1 MajorK")
    expect(routing_logits.shape == (tokens, num_experts) and routing_bias.shape == (num_experts,), "routing shapes")
    weights, chosen = _route(routing_logits, routing_bias, n_group, topk_group, top_k, routed_scaling_factor)
    x = hidden_states.float() * hidden_states_scale.float().T.repeat_interleave(128, dim=1)[:, :hidden]
    out = _experts(
        x, chosen, weights, gemm1_weights, gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, local_expert_offset
    )
    CALLS.append(("trtllm_fp8_block_scale_moe", local_expert_offset, local_num_experts))
    return out.to(torch.bfloat16)


CALLS: list[tuple[Any, ...]] = []


def module() -> types.ModuleType:
    """A fresh ``flashinfer`` stand-in (with ``mla`` and ``fused_moe`` submodules) and an empty call record."""
    CALLS.clear()
    flashinfer = types.ModuleType("flashinfer")
    flashinfer.__version__ = "0.7.4"
    flashinfer.BatchDecodeWithPagedKVCacheWrapper = BatchDecodeWithPagedKVCacheWrapper
    flashinfer.BatchMLAPagedAttentionWrapper = BatchMLAPagedAttentionWrapper
    flashinfer.mla = types.ModuleType("flashinfer.mla")
    flashinfer.mla.MLAPlanMetadata = MLAPlanMetadata
    flashinfer.fused_moe = types.ModuleType("flashinfer.fused_moe")
    for fn in (fused_topk_deepseek, cutlass_fused_moe, trtllm_fp8_block_scale_moe):
        setattr(flashinfer.fused_moe, fn.__name__, fn)
    flashinfer.calls = CALLS
    return flashinfer
