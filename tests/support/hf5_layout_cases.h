// The transformers-5-layout fixtures (tests/fixtures/hf5_layout, made by
// tools/fixtures/make_hf5_layout_fixtures.py with transformers 5.17): LLaVA, Qwen2-VL and
// Qwen2.5-VL directories as save_pretrained writes them (processor_config.json with the image and
// video processors nested, chat_template.jinja), each with chat cases (image, two images, video
// as bare frames without fps, mixed) and HF's greedy tokens with their logprobs.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vlm::testing {

struct Hf5Step {
  int32_t id = 0;
  double logprob = 0;
  std::vector<double> top_logprobs;  // the 5 best, best first
  double margin = 0;                 // logit gap between the best two
};

struct Hf5Case {
  std::string name;
  nlohmann::ordered_json messages;  // OpenAI-style: image_url data URLs; a video as a video_url
                                    // list of frame data URLs, no fps
  std::vector<int32_t> input_ids;   // HF processor (placeholders expanded)
  std::vector<int32_t> generated;   // HF generate(), greedy
  std::vector<Hf5Step> steps;       // full-recompute greedy with logprobs
};

// "llava", "qwen2_vl" or "qwen2_5_vl".
std::vector<Hf5Case> hf5_layout_cases(const std::string& model);

// A servable copy of the fixture directory under /tmp (the Qwen ones get tests/data's Qwen3
// tokenizer.json, which the fixture leaves out); `drop` names files to leave out of the copy.
// Created per call; removed at exit.
std::string hf5_layout_model_dir(const std::string& model, const std::vector<std::string>& drop = {});

std::string hf5_fixture_dir(const std::string& model);  // tests/fixtures/hf5_layout/MODEL

}  // namespace vlm::testing
