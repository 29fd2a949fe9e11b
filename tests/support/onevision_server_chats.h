// The LLaVA-OneVision fixtures' recorded chats through a running vlm-server (tests/server and the
// GPU's tests/server/cuda): each cases.json chat sent over HTTP as OpenAI messages (data: URLs of
// the fixture's PNGs), greedy, with the top-5 logprobs.
#pragma once

#include <string>

#include "tests/support/server_process.h"

namespace vlm::testing {

// For every chat of MODEL_DIR/cases.json (media from ROOT/media), one request at a time, bounded by
// the cases (9): status 200; HF's greedy tokens (generated_ids) exactly; usage.prompt_tokens = HF's
// input_ids (media tokens counted); per step the sampled token's logprob and the top-5 logprobs,
// rank by rank, within `logprob_tol` (absolute) of HF f32's.
// Returns the worst logprob difference seen. Failures are gtest EXPECT/ADD_FAILUREs naming LABEL.
double expect_served_onevision_chats_match_hf(const ServerProcess& server, const std::string& root,
                                              const std::string& model_dir, double logprob_tol,
                                              const std::string& label);

}  // namespace vlm::testing
