// The GPU's mixture-of-experts block (MoeSpec, model/layers/layer_specs.h; the CPU's is
// cpu_moe.h, the reference it is tested against), on the kernels of kernels/cuda/moe/moe_cuda.h:
// h = pre_norm(x) in the compute dtype; router logits h W_r^T [T, E] in f32 (the decoder's
// product: GEMV or cuBLASLt); routing and the grouping of the T*k (token, expert) pairs by expert
// on the device; gate|up with SiLU·mul and down as grouped products over the sorted pairs (one
// launch each for all experts: tensor-core row tiles, or per-expert GEMVs when the step has at
// most 8 pairs per expert on average, so a decode step reads only its chosen experts' weights);
// f32 runs the naive products); the combine weighted by the routing weights back into token order,
// with the residual add. No host sync, no allocation, no host read of device data in forward: a
// decode step's MoE layers are captured in the decode CUDA graphs. All of the step's buffers live
// in the `inner` activation (inner_cols() states them: the logits, choices, weights, both
// permutations, the SiLU·mul rows [T*k, I] and the experts' outputs [T*k, C] in the compute dtype);
// the per-expert offsets, tile starts and the list of experts with pairs ([E+1] each) are the
// layer's own device memory.
// Decode (kernels/cuda/moe/moe_decode.h, 16-bit): for T <= kMoeRouteSortMaxTokens the router
// product, routing and sorting are one launch; for T <= kMoePairGemvMaxTokens the experts run as
// pair GEMVs (one warp per output) with the combine folded into the down product (deterministic:
// one warp owns each y element, the token's pairs summed in a fixed order), three launches a
// layer after the norm in place of five; the down product is the staged form (moe_decode.h 3'.).
// VLM_MOE_DECODE=old in the environment (read once) runs the five, VLM_MOE_DECODE=v1 the three
// with session 18's down product (3.; the same bits as 3'.), VLM_MOE_DECODE=staged the staged
// gate|up (2'.; the same bits as 2.) as well (the A/B in one GPU run). The staged down product is
// filled by bulk copies (3b., the same bits) unless VLM_MOE_DOWN_BULK=0 (moe_limits.h's
// kMoeDownBulkDefault).
// At one token the norm-fused router skips the sort the pair GEMVs do not read (VLM_MOE_SKIP_SORT=0
// keeps it).
// Weights: router [E, C], gate|up [E, 2I, C] and down [E, C, I] in the compute dtype, from any
// ExpertLayout (FusedTransposed transposed on the device at load). Refused at load (LoadError
// naming the router): more than kMoeMaxExperts experts, top-k above kMoeMaxTopK, and a block
// without a pre-norm on a 16-bit GPU.
#pragma once

#include <memory>

#include "kernels/core/dtype.h"
#include "model/layers/layer_specs.h"
#include "model/layers/layers.h"

namespace vlm {

// Adds the uploaded bytes to *bytes.
std::unique_ptr<Mlp> make_cuda_moe(const WeightSource& w, const MoeSpec& spec, DType dt, int64_t* bytes);

}  // namespace vlm
