// The offline per-head pattern search on the GPU (vlm-search-patterns --device cuda): the same
// candidates, figures and selection as the CPU search (model/methods/sparse_pattern_search.h),
// measured on CudaDecoder's bf16 prefill at lengths the CPU cannot reach.
//
// The prompt is prefilled in chunks of `chunk` tokens (activations bounded by the chunk, the
// cache holds the whole prompt). The probe (CudaDecoder::set_attention_probe) runs on the LAST
// chunk only: its rows (positions [N - q_len, N)) against all N keys, as the last chunk of a
// chunked sparse prefill sees them (a prompt of at most `chunk` tokens: every row, as the CPU
// search). Per layer: the dense output (paged_prefill_attention), then per candidate its output
// through the block-sparse kernel and its per-head error sums and computed key blocks reduced on
// the device (head_error.h); one download of those 3 * H numbers per candidate per layer.
// A candidate's plan comes from CudaSparsePrefill (device estimation / host plans from device
// searches) when gpu_plans() says the GPU plans it; otherwise from the CPU planners
// (build_sparse_plan) over that layer's q and K downloaded once (f32 q, bf16 K), uploaded and
// run by the same kernel. When CudaSparsePrefill learns a head type (plannable_without_host_data
// grows), the search takes the device path for it with no change here.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/decoder/llm_decoder.h"
#include "model/methods/sparse_pattern_search.h"

namespace vlm {

struct CudaPatternSearchOptions {
  int block = 64;                       // plan blocks (the GPU kernel's: 64)
  int64_t chunk = 8192;                 // prefill chunk (tokens per step)
  double gpu_memory_utilization = 0.9;  // weights, activations and the cache of N tokens must fit
  int device = 0;
};

// Whether the GPU plans a candidate (CudaSparsePrefill), or the search plans it on the host.
bool gpu_plans(const HeadPattern& pattern, int block);

// Throws LoadError when the model does not fit or its heads are not 64/128 wide, InternalError on
// a CUDA failure. progress(layer) (optional) after each layer's figures are in.
PatternSearchTable search_patterns_cuda(const LlmDecoder& decoder, const PatternSearchPrompt& prompt,
                                        const std::vector<PatternCandidate>& cands,
                                        const CudaPatternSearchOptions& options,
                                        const std::function<void(int)>& progress = {});

}  // namespace vlm
