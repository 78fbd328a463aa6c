"""FlashInfer's production FP8 block-scale MoE behind the definition's ``run`` (flashinfer-python 0.7.4).

On Blackwell (SM100/SM103) the definition maps one to one onto ``flashinfer.fused_moe.trtllm_fp8_block_scale_moe``
(DeepSeek-V3 routing, the same fp8 activations with their transposed ``[hidden / 128, seq_len]`` scales, MajorK
weights, 128x128 block scales, SwiGLU with the second half as the gate); its JIT build asks only for SM10x/SM12x
targets and fetches its kernel images from FlashInfer's artifact store, so it needs the network on first use.

On Hopper (SM90) FlashInfer's path is two calls: ``fused_topk_deepseek`` (sigmoid plus bias, best 4 of 8 groups by
their top-2 sum, top 8, weights from the unbiased scores, normalised, times the scaling factor) and
``cutlass_fused_moe`` with ``use_deepseek_fp8_block_scale=True`` (SM90 only), expert parallel over
``num_experts / num_local_experts`` ranks. That kernel quantises bf16 activations itself (1x128 blocks), so the
definition's fp8 activations are dequantised to bf16 first; that conversion is timed with it. The harness's own
baseline, never a candidate.
"""

import torch

BLOCK = 128
TOP_K = 8
N_GROUP = 8
TOPK_GROUP = 4
DEEPSEEK_V3_ROUTING = 2
"""``flashinfer.tllm_enums.RoutingMethodType.DeepSeekV3``."""


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
    from flashinfer import fused_moe

    seq_len, hidden_size = hidden_states.shape
    num_experts = routing_logits.shape[1]
    num_local_experts, gemm1_out, _ = gemm1_weights.shape
    if torch.cuda.get_device_capability(hidden_states.device)[0] == 10:
        return fused_moe.trtllm_fp8_block_scale_moe(
            routing_logits,
            routing_bias,
            hidden_states,
            hidden_states_scale,
            gemm1_weights,
            gemm1_weights_scale,
            gemm2_weights,
            gemm2_weights_scale,
            num_experts,
            TOP_K,
            N_GROUP,
            TOPK_GROUP,
            gemm1_out // 2,
            int(local_expert_offset),
            num_local_experts,
            float(routed_scaling_factor),
            routing_method_type=DEEPSEEK_V3_ROUTING,
            use_shuffled_weight=False,
            weight_layout=0,
        )
    device = hidden_states.device
    scores = routing_logits.to(torch.float32).contiguous()
    weights = torch.empty((seq_len, TOP_K), dtype=torch.float32, device=device)
    experts = torch.empty((seq_len, TOP_K), dtype=torch.int32, device=device)
    fused_moe.fused_topk_deepseek(
        scores,
        routing_bias.to(torch.float32).contiguous(),
        N_GROUP,
        TOPK_GROUP,
        TOP_K,
        float(routed_scaling_factor),
        weights,
        experts,
    )
    scale = hidden_states_scale.to(torch.float32).T.repeat_interleave(BLOCK, dim=1)[:, :hidden_size]
    activations = (hidden_states.to(torch.float32) * scale).to(torch.bfloat16)
    return fused_moe.cutlass_fused_moe(
        activations,
        experts,
        weights,
        gemm1_weights,
        gemm2_weights,
        torch.bfloat16,
        quant_scales=[gemm1_weights_scale, gemm2_weights_scale],
        ep_size=num_experts // num_local_experts,
        ep_rank=int(local_expert_offset) // num_local_experts,
        use_deepseek_fp8_block_scale=True,
    )
