// FP8 linear layers on the GPU (issue 43): weights E4M3 [N, K] with one f32 scale per output
// channel, products on the FP8 tensor cores.
//  - upload_linear_fp8: a linear layer's parts as FP8. A part the checkpoint stores in FP8
//    (WeightSource::fp8) is taken as stored: per-channel scales (compressed-tensors) as they are;
//    128x128 block scales (transformers' "fp8") requantized per output channel on the GPU from
//    their exact f32 values (dequantize_fp8_blocks, then quantize_fp8_rows): one more E4M3
//    rounding (<= 2^-4 relative per weight, less where a row's blocks share its largest scale) in
//    exchange for one GEMM and one GEMV for every format. Any other part (a bf16 checkpoint under
//    --quantization fp8) is uploaded as stored and quantized per output channel on the GPU (the bits
//    of kernels/core/fp8.h's quantize_fp8_rows over its values).
//    Biases stay bf16 and f32. Synchronous (the load's temporaries are freed before it returns).
//  - fp8_product: y [M, N] (out_dt: BF16 or F32) = x [M, K] (BF16) W^T (+ bias) (+ y when
//    accumulate): steps of few rows (CudaStep::gemv, fp8_gemv_supported) through the W8A16 GEMV
//    (x stays bf16), others quantize x per token (dynamic scales: quantize_fp8_rows into the step's
//    scratch) and run cuBLASLt's FP8 GEMM with both scales in its epilogue (where cuBLASLt takes no
//    F32 output with a bias or the residual add beside per-row scales, the GEMM writes an f32
//    scratch and fp8_scale_epilogue adds: CublasLtGemm::linear_fp8's unfused form).
//  - Decode paths (VLM_FP8_DECODE, read once): "old" keeps session 15's (fp8_gemv's Simple form
//    for 1..4 rows, quantize + cuBLASLt for more); "tile" (any other value: the default since
//    session 19's call B: 64 rows at 1K 5.10 vs 5.91 ms a Qwen2-7B step, bench/RESULTS.md "Session
//    19, call B") keeps the Simple GEMV for 1..4 rows and runs quantize_fp8_rows then fp8_tile_gemm
//    (Hopper FP8 wgmma, weights staged through shared memory, scales / bias / residual / SiLU·mul
//    in its epilogue; kernels/cuda/gemm/fp8_tile_gemm.h) for 5..64 rows (decode batches; prefill
//    chunks that short too). Steps of more rows: cuBLASLt, as before. (Removed after measurement:
//    session 17's opt-in "w8a16" product and VLM_FP8_GEMV_SPLIT in session 18; VLM_FP8_DECODE=new,
//    the Pipelined GEMV with the mma.sync kernel fp8_mma_gemm, whose E4M3 mma is emulated through
//    f16 on sm_90, in session 20: 64 rows 7.75 vs 5.10 ms a step, bench/RESULTS.md "Session 19,
//    call B".)
//  - require_fp8_gpu: the start-time refusal of a GPU without FP8 tensor cores (compute
//    capability below 8.9), naming the GPU and what asked for FP8; also of FP8-capable GPUs other
//    than Hopper (Ada 8.9, Blackwell 10.x/12.x): cuBLASLt's outer-vector (per-row) FP8 scaling the
//    GEMM relies on is SM90-only (an epilogue kernel after a scalar-scaled GEMM would serve them).
#pragma once

#include <string>
#include <vector>

#include "model/layers/cuda/cuda_device_linear.h"

namespace vlm {

enum class Fp8DecodePaths { Old, Tile };
// VLM_FP8_DECODE=old -> Old; anything else (the default) -> Tile.
Fp8DecodePaths fp8_decode_paths();

DeviceLinear upload_linear_fp8(const WeightSource& src, const std::vector<LinearPart>& parts, int64_t* bytes);

void fp8_product(CudaStep& s, const DeviceLinear& d, const void* x, void* y, DType out_dt, bool accumulate, int64_t M);

// Few rows (CudaStep::gemv and fused_norm, 1..4 rows, an RMS pre-norm whose staged rows fit, the
// switch VLM_FP8_GEMV_NORM on: kernels/cuda/gemm/fp8_gemv_v2.h): y [M, N] (+)= pre(x [M, K] f32) W^T in one
// launch (fp8_gemv_norm), returning true; false, with nothing enqueued, where the norm does not fold
// (the caller then runs pre->apply and fp8_product). Few-row fp8_product / fp8_gated_mlp run
// fp8_gemv_v2's deeper GEMVs under VLM_FP8_GEMV_V2 (same bits as fp8_gemv's Simple form).
bool fp8_product_norm(CudaStep& s, const DeviceLinear& d, const CudaPreNorm& pre, const float* x, void* y,
                      DType out_dt, bool accumulate, int64_t M);

// The gated MLP over FP8 weights (CudaLayers' gated MLP hands its FP8 steps here): the norm apart
// (pre may be null; folded into the gate/up GEMV where fp8_product_norm would fold it), gate/up
// [2I, C] with SiLU·mul in the FP8 GEMV for few rows (act [T, I] dt), else the FP8 GEMM into inner
// [T, 2I] and silu_mul; y [T, C] (+)= act down^T through fp8_product.
void fp8_gated_mlp(CudaStep& s, const DeviceLinear& gate_up, const DeviceLinear& down, const CudaPreNorm* pre,
                   int64_t I, Act x, Act inner, void* act, Act y, bool accumulate);

// Throws LoadError "<why>: GPU <n> (<name>, compute capability X.Y) has no FP8 tensor cores ..." for
// such a GPU, and "... FP8 linear layers run on Hopper (sm_90) only ..." for a non-Hopper one.
void require_fp8_gpu(int device, const std::string& why);

}  // namespace vlm
