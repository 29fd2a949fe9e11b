// The Qwen2-VL / Qwen2.5-VL chat fixtures (tests/fixtures/qwen2vl_server, made by
// tools/fixtures/make_qwen2vl_server_fixtures.py with transformers 5.17): tiny models with the
// real Qwen vocabulary, chat messages holding images and videos (PNG frames), and what Hugging
// Face's processor and generate() made of them.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/media/media_pixels.h"
#include "model/decoder/modality.h"
#include "model/families/multimodal_input.h"

namespace vlm::testing {

struct Qwen2VLChatCase {
  std::string name;
  nlohmann::ordered_json messages;  // OpenAI-style: image_url data URLs; videos as video_url
                                    // {"url": [frame data URLs], "fps": F}
  std::string prompt_text;          // HF apply_chat_template
  std::vector<int32_t> input_ids;   // HF processor (placeholders expanded)
  std::vector<std::array<int32_t, 3>> image_grids, video_grids;
  std::vector<float> second_per_grid;  // Qwen2.5-VL videos
  std::vector<int32_t> generated;      // HF generate(), greedy
  std::string generated_text;          // tokenizer.decode(generated, skip_special_tokens=True)
  double min_margin = 0;
  int num_videos = 0;
};

// "qwen2_vl_chat" or "qwen2_5_vl_chat".
std::vector<Qwen2VLChatCase> qwen2vl_chat_cases(const std::string& model);

// A servable directory: the fixture model's files with the Qwen3 tokenizer from tests/data
// (fetched by scripts/fetch_test_data.sh). Created once per process and model under /tmp.
const std::string& qwen2vl_chat_model_dir(const std::string& model);

// The engine's input for a case, built as the server builds it: the model dir's chat template
// over the messages (media parts as {"type": "image"/"video"}), the tokenizer, the media loaded
// from their data URLs by server/qwen2vl_media_loader and the placeholders expanded.
struct Qwen2VLPromptInput {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<ModalityTag> tags;
  MultimodalPrompt prompt;
  std::vector<MediaPixels> items;
};
Qwen2VLPromptInput qwen2vl_prompt_input(const std::string& model, const Qwen2VLChatCase& c);

std::string png_data_url(const std::string& media_file);  // a file of tests/fixtures/qwen2vl_server/media

}  // namespace vlm::testing
