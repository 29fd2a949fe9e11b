// cuda_model_support: every shape limit of the GPU kernels, checked against a model and an
// engine configuration in one place, on the host, before any GPU is touched (so a model the
// CUDA backend cannot run is refused at start, naming the shape, never served as a stream of
// 500s behind a 200 health check; shared/DESIGN.md, "Models: written once").
//
// What is checked (the kernels that impose it in brackets):
//  - the decoder's math: Qwen3's q/k RMSNorm, interleaved M-RoPE, Qwen3-VL's DeepStack (CudaLayers'
//    RowOps) and mixture-of-experts layers run on the GPU; for the last, the layouts the config
//    parser refuses stay refused for both backends, and the GPU takes at most cuda::kMoeMaxExperts
//    experts and top-k at most cuda::kMoeMaxTopK [moe_route, moe_sort, moe_combine];
//  - decoder attention: H % Hkv == 0; head size D a multiple of 8 [paged_kv_write] and at most
//    256 [CudaDecoder]; a power-of-two block size [the tiled kernels]; D other than 64 / 128
//    runs on the reference kernel [paged_attention_naive], which holds at most
//    12000 tokens (kernels/cuda/attention/attention_naive.cu) of context, so max_model_len must not exceed it;
//  - sparse prefill asked for by flag: a method the GPU plans, 64-token blocks, a bf16/f16/fp8
//    cache, D 64 / 128 [paged_block_sparse_attention], XAttention at most 128 query heads;
//  - SinkRouter on by flag: D 64 / 128 and G = H / Hkv <= kCudaDecodeMaxGroup (routing rides
//    on the decode kernel; elsewhere every decode would silently run exact), and the routing
//    kernel's shared memory (H + (Hkv + H)(D + 1) floats within 48 KB, H <= 1024);
//  - LOOK-M on by flag: G <= 16 and D <= 256 [look_m_accumulate_scores];
//  - --kv-cache-dtype fp8: not with --dtype float32, nor with sparse prefill that has XAttention
//    heads (its estimate does not read an F8_E4M3 cache) [xattn_block_scores]; the block-sparse
//    kernel, the other estimates and LOOK-M read FP8;
//  - the vision tower (vision_head_dim > 0): its attention off tensor cores (F32, or a head size
//    not a multiple of 8 or above 128) runs the reference kernel [varlen_attention_naive], whose
//    segments hold at most cuda::kMaxNaiveLen rows, so max_media_patches must not exceed it.
// A method asked for per request on a shape the GPU cannot run is a 400 for that request
// (StepBackend::runs_sparse_prefill, StepBackend::runs_look_m), not a load failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_config.h"
#include "model/decoder/model_config.h"

namespace vlm {

// The problems that keep the CUDA backend from running `model` under `config`, each a sentence
// naming the shape and what to change; empty when it runs. dtype: the GPU's compute and cache
// dtype (EngineConfig::dtype, else the checkpoint's); max_model_len: the resolved longest
// sequence; vision_head_dim: the vision tower's head size (0: no tower). Pure, host only.
std::vector<std::string> cuda_model_support(const ModelConfig& model, const EngineConfig& config, DType dtype,
                                            int64_t max_model_len, int64_t vision_head_dim = 0);

// The problems as one message for a LoadError ("--device cuda cannot run this model: ...").
std::string cuda_support_message(const std::vector<std::string>& problems);

// The decode kernel's query heads per KV head (kRows of kernels/cuda/attention/decode_attention.cu).
constexpr int64_t kCudaDecodeMaxGroup = 16;

// D 64 or 128: the decoder's tensor-core attention kernels (else the reference kernel).
inline bool cuda_fast_head_dim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

}  // namespace vlm
