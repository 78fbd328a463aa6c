"""DeepSeek-V3 fp8 block-scale MoE (moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048) in plain PyTorch.

A reference-based solution: the definition's arithmetic, float32 throughout, so its output matches the reference's
to the last bit on the same device; what it changes is the bookkeeping around it:
- the routes are grouped by local expert with two host synchronisations per call, not one ``nonzero`` per expert;
- only experts that received tokens have their weights dequantised;
- block scales are broadcast over 128x128 views instead of expanded with ``repeat_interleave`` (no full-size
  temporaries besides the dequantised weights themselves).
No custom kernel: it is the baseline a searched kernel (fused fp8 GEMMs with block scales) should beat.
"""

import torch

BLOCK = 128
TOP_K = 8
N_GROUP = 8
TOPK_GROUP = 4


def _dequantise(weights: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[rows, cols] fp8 weights times their [rows/128, cols/128] block scales, in float32."""
    rows, cols = weights.shape
    blocks = weights.to(torch.float32).view(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK)
    return (blocks * scales[:, None, :, None]).view(rows, cols)


def _route(routing_logits: torch.Tensor, routing_bias: torch.Tensor, routed_scaling_factor: float):
    """(top-8 expert ids [T, 8], their routing weights [T, 8]): no-aux-loss routing as the definition's."""
    seq_len, num_experts = routing_logits.shape
    scores = torch.sigmoid(routing_logits.to(torch.float32))
    biased = scores + routing_bias.to(torch.float32)
    group_size = num_experts // N_GROUP
    group_scores = biased.view(seq_len, N_GROUP, group_size).topk(2, dim=-1).values.sum(dim=-1)
    top_groups = group_scores.topk(TOPK_GROUP, dim=-1).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, top_groups, 1.0)
    expert_mask = group_mask.repeat_interleave(group_size, dim=1) > 0
    topk_idx = biased.masked_fill(~expert_mask, -float("inf")).topk(TOP_K, dim=-1).indices
    weights = scores.gather(1, topk_idx)
    return topk_idx, weights / weights.sum(dim=-1, keepdim=True) * routed_scaling_factor


@torch.no_grad()
def run(
    routing_logits,
    routing_bias,
    hidden_states,
    hidden_states_scale,
    gemm1_weights,
    gemm1_weights_scale,
    gemm2_weights,
    gemm2_weights_scale,
    local_expert_offset,
    routed_scaling_factor,
):
    seq_len = routing_logits.shape[0]
    num_local, gemm1_out, hidden_size = gemm1_weights.shape
    intermediate = gemm1_out // 2
    topk_idx, route_weights = _route(routing_logits, routing_bias, routed_scaling_factor)

    # Routes to this rank's experts, grouped by expert; within an expert, tokens ascending (nonzero is row-major).
    local = topk_idx - int(local_expert_offset)
    tokens, slots = ((local >= 0) & (local < num_local)).nonzero(as_tuple=True)
    experts = local[tokens, slots]
    order = torch.argsort(experts, stable=True)
    tokens, experts = tokens[order], experts[order]
    weights = route_weights[tokens, slots[order]]
    counts = torch.bincount(experts, minlength=num_local).tolist()

    # hidden_states_scale is [hidden / 128, seq_len] (transposed).
    blocks = hidden_states.to(torch.float32).view(seq_len, hidden_size // BLOCK, BLOCK)
    activations = (blocks * hidden_states_scale.T[:, :, None]).view(seq_len, hidden_size)
    output = torch.zeros((seq_len, hidden_size), dtype=torch.float32, device=routing_logits.device)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        rows = tokens[start : start + count]
        weight = weights[start : start + count]
        start += count
        h = activations[rows] @ _dequantise(gemm1_weights[expert], gemm1_weights_scale[expert]).T
        act = torch.nn.functional.silu(h[:, intermediate:]) * h[:, :intermediate]
        down = act @ _dequantise(gemm2_weights[expert], gemm2_weights_scale[expert]).T
        output.index_add_(0, rows, down * weight[:, None])
    return output.to(torch.bfloat16)
