// The decoder's forward as one loop over the kernels, as it was before the architecture was
// written over layers (model/arch/llama_decoder.h): kept for one commit so a test can show the
// layered forward gives the same logits bit for bit (issue 39, docs/WRITTEN_ONCE.md step 2).
#pragma once

#include <span>
#include <vector>

#include "model/decoder/llm_decoder.h"

namespace vlm::testing {

void llm_decoder_loop(const LlmDecoder& d, const ForwardBatch& batch, std::span<const PagedKVLayer> kv_layers,
                      std::vector<float>& logits, const EmbeddingOverride& override = {});

}  // namespace vlm::testing
