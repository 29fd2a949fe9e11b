// Model: the one interface the engine, the methods' tools and the media path see of a checkpoint
// (issue 39 step 6, docs/WRITTEN_ONCE.md section 3), in place of the engine's direct use of
// LlmDecoder plus a separate MultimodalModel. A model has
//  - its decoder: LlmDecoder, the family-agnostic CPU runner of the decoder architecture
//    (model/arch/llama_decoder.h over CpuLayers); the GPU's CudaDecoder binds the same
//    architecture to CudaLayers from it (weights, config);
//  - for a vision-language model, its media side: token ids, token counts and M-RoPE positions
//    (host only), the CPU encoder (encode_media, the vision architecture over CpuLayers) and
//    vision_binding(): which vision architecture it is, with the specs and tensors another backend builds
//    its own copy from (model/families/vision_binding.h; CudaMediaEncoder picks its GPU runner by
//    it, no family class named).
// Implemented by TextModel (below: a text checkpoint), LlavaModel, LlavaOnevisionModel,
// Qwen2VLModel and Qwen3VLModel (model/families/).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "model/decoder/llm_decoder.h"
#include "model/decoder/mrope_positions.h"
#include "model/families/vision_binding.h"
#include "model/media/media_pixels.h"

namespace vlm {

class Model {
 public:
  virtual ~Model() = default;

  virtual const LlmDecoder& decoder() const = 0;
  const ModelConfig& text() const { return decoder().config(); }  // KV shape, heads, vocab, eos

  // Whether requests may carry media. False (a text model): the media methods below are never
  // called (media_tokens and encode_media throw InternalError).
  virtual bool has_media() const { return false; }
  virtual bool accepts_video() const { return false; }
  // The vision tower's attention head size (0: none); the GPU's shape checks read it.
  virtual int64_t vision_head_dim() const { return 0; }
  // The placeholder token ids of image / video tokens in prompts (-1: none).
  virtual int32_t image_token_id() const { return -1; }
  virtual int32_t video_token_id() const { return -1; }

  // The prompt tokens item k occupies (rows of its embeddings). Throws RequestError (400, param
  // "messages") when the item's pixels do not fit the encoder (wrong size or layout), or the
  // model does not take its modality.
  virtual int64_t media_tokens(const MediaPixels& item, int k) const;
  // Video: tokens of one temporal grid step (rows x cols after the merger); image: all of them.
  virtual int64_t tokens_per_frame(const MediaPixels& item) const { return media_tokens(item, 0); }

  // Planes per media row (EmbeddingOverride::num_planes): 1, or 1 + K with DeepStack (Qwen3-VL:
  // the decoder's config().deepstack_layers = K).
  virtual int64_t embedding_planes() const { return 1; }

  // Encodes items (checked by media_tokens) on the CPU -> out[sum media_tokens,
  // embedding_planes() * C], item after item, C the decoder's hidden size (each row its planes
  // side by side, plane 0 the input embedding). Thread-safe (const); uses the kernels' thread pool.
  virtual void encode_media(std::span<const MediaPixels* const> items, float* out) const;

  // The M-RoPE positions of a prompt holding `items` (prompt order), or nullopt for a model with
  // 1-D positions. Throws RequestError (400) when the placeholders do not match the items.
  virtual std::optional<MropePositions> mrope_positions(std::span<const int32_t> /*ids*/,
                                                        std::span<const MediaPixels> /*items*/) const {
    return std::nullopt;
  }

  // Which vision architecture the media side is and what another backend builds it from
  // (std::monostate: none, or none another backend can build). The references in it live as
  // long as the model.
  virtual VisionBinding vision_binding() const { return {}; }
};

// A text checkpoint (LlamaForCausalLM, Qwen2 / Qwen3 / Qwen3-MoE): its decoder, no media.
class TextModel final : public Model {
 public:
  explicit TextModel(std::unique_ptr<LlmDecoder> decoder);
  // LlmDecoder::load(model_dir) (throws what it throws).
  static std::unique_ptr<TextModel> load(const std::string& model_dir, const WeightLoadOptions& options = {});
  const LlmDecoder& decoder() const override { return *decoder_; }

 private:
  std::unique_ptr<LlmDecoder> decoder_;
};

}  // namespace vlm
