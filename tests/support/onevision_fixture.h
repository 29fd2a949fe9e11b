// The LLaVA-OneVision fixture (tests/fixtures/llava_onevision, made by
// tools/fixtures/make_llava_onevision_fixtures.py with transformers 5.17): a tiny model with the
// real Qwen vocabulary, its PNG media, and the recorded chats (cases.json: messages whose media
// parts name files of media/, HF's prompt text, input_ids, generated ids, top-5 logprobs).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace vlm::testing {

// tests/fixtures/llava_onevision
const std::string& onevision_fixture_root();
// A servable directory: ov_tiny's files with the Qwen3 tokenizer from tests/data (fetched by
// scripts/fetch_test_data.sh). Created once per process under /tmp, removed at exit.
const std::string& onevision_model_dir();
// The recorded chats.
nlohmann::json onevision_cases();
// A data: URL of a media/ file.
std::string onevision_data_url(const std::string& media_file);
// A whole file's bytes; throws std::runtime_error naming it.
std::string read_whole_file(const std::string& path);

}  // namespace vlm::testing
