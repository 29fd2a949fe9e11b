#include "model/families/model.h"

#include "kernels/core/check.h"

namespace vlm {

int64_t Model::media_tokens(const MediaPixels&, int) const {
  throw InternalError("media_tokens on a model without media (Model::has_media is false)");
}

void Model::encode_media(std::span<const MediaPixels* const>, float*) const {
  throw InternalError("encode_media on a model without media (Model::has_media is false)");
}

TextModel::TextModel(std::unique_ptr<LlmDecoder> decoder) : decoder_(std::move(decoder)) {
  VLM_CHECK(decoder_ != nullptr, "a text model without a decoder");
}

std::unique_ptr<TextModel> TextModel::load(const std::string& model_dir, const WeightLoadOptions& options) {
  return std::make_unique<TextModel>(LlmDecoder::load(model_dir, options));
}

}  // namespace vlm
