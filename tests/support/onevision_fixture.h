// The LLaVA-OneVision fixture (tests/fixtures/llava_onevision, made by
// tools/fixtures/make_llava_onevision_fixtures.py with transformers 5.17): a tiny model with the
// real Qwen vocabulary, its PNG media, and the recorded chats (cases.json: messages whose media
// parts name files of media/, HF's prompt text, input_ids, generated ids, top-5 logprobs).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/media/media_pixels.h"

namespace vlm::testing {

// tests/fixtures/llava_onevision
const std::string& onevision_fixture_root();
// A servable directory: ov_tiny's files with the Qwen3 tokenizer (as onevision_gpu_served_dir).
// Created once per process under /tmp, removed at exit.
const std::string& onevision_model_dir();
// The recorded chats.
nlohmann::json onevision_cases();
// A data: URL of a media/ file (of ROOT/media: the fixture's root by default).
std::string onevision_data_url(const std::string& media_file);
std::string onevision_data_url(const std::string& media_file, const std::string& root);
// A cases.json entry's messages as OpenAI messages: image_url parts and video_url parts (frame
// lists) with data: URLs of ROOT/media's files, text parts as they are.
nlohmann::ordered_json onevision_openai_messages(const nlohmann::json& c, const std::string& root);
// A whole file's bytes; throws std::runtime_error naming it.
std::string read_whole_file(const std::string& path);

// tests/fixtures/llava_onevision_gpu: ov_gpu (--variant gpu: 44-px tiles over 8-px patches, text
// and SigLIP head size 8, so the GPU takes it), its media and reference.safetensors.
std::string onevision_gpu_root();
std::string onevision_gpu_model_dir();  // ROOT/ov_gpu (no tokenizer: the cases carry HF's input_ids)
// A servable copy of ov_gpu: its files with the Qwen3 tokenizer (tests/data's, or a GPU bundle's
// BIN/../tokenizer beside the running test binary). Created once per process under /tmp, removed
// at exit; throws std::runtime_error naming where it looked when no tokenizer is found.
const std::string& onevision_gpu_served_dir();

// A recorded case with its media as the model takes them: the PNGs of ROOT/media preprocessed
// with the model dir's processor configs (images, then videos: the template's prompt order).
struct OnevisionCase {
  nlohmann::json hf;               // the cases.json entry
  std::vector<MediaPixels> items;  // prompt order
};
std::vector<OnevisionCase> onevision_recorded_cases(const std::string& root, const std::string& model_dir);

}  // namespace vlm::testing
