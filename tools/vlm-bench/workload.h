// The requests of a run, built before it starts (so building them never delays the clock):
//   random     prompts of input_len ± range_ratio tokens, output_len ± range_ratio tokens asked
//              for with ignore_eos (vLLM's random dataset: lengths uniform in [len(1-r), len(1+r)]);
//   random-mm  the same, plus images_per_request generated PNG images (data: URLs) and
//              video_frames frames, sent as consecutive image_url parts (portable to any
//              OpenAI-compatible server), or with video_part as one video_url part whose value
//              is the list of the frames' URLs (a video to servers that take frame lists);
//   jsonl      one request per line, cycled to num_prompts: a request body object ({"messages"}
//              or {"prompt"}, fields kept; "images": [...] next to "prompt" becomes chat content),
//              or a JSON array of chat messages. image_url parts that name a local path (or
//              file://) are read and sent as data: URLs; relative paths are relative to the file.
// Every body gets model, stream (+ stream_options.include_usage when streaming), and max_tokens
// when the line has none. The same seed gives the same requests.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tools/vlm-bench/bench_options.h"
#include "tools/vlm-bench/prompt_builder.h"

namespace vlm::bench {

struct PreparedRequest {
  int index = 0;
  std::string body;        // JSON
  int input_len = 0;       // the asked-for prompt tokens (0 when unknown: jsonl)
  int output_len = 0;      // max_tokens
  int num_images = 0;      // image parts (frames included)
};

// A chat content part holding an image as a data: URL: the file image_files[index % count]
// (--image-file: real image bytes, sent as they are) or, without files, a generated PNG
// (image_width x image_height, random pixels from seed).
nlohmann::json image_part(const BenchOptions& options, int64_t index, uint64_t seed);
// Adds model, stream (+ include_usage), and max_tokens/ignore_eos unless the body has them.
void finish_request_body(nlohmann::json& body, const BenchOptions& options, const std::string& model, int output_len);

// Builds `count` requests (index offset first_index; seed_salt separates warmup from the run).
// Throws UsageError for a jsonl file that cannot be read or a bad line (naming file:line).
std::vector<PreparedRequest> build_workload(const BenchOptions& options, const std::string& model,
                                            PromptBuilder& prompts, int count, uint64_t seed_salt);

}  // namespace vlm::bench
