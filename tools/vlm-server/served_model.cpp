// vlm-server's model loading by architecture (the contract is in served_model.h).
#include "tools/vlm-server/served_model.h"

#include <unistd.h>

#include <cstdio>

#include "engine/backends/make_step_backend.h"
#include "kernels/core/check.h"
#include "model/families/architecture.h"
#include "model/families/llava.h"
#include "model/families/llava_onevision.h"
#include "model/families/qwen2_vl.h"
#include "model/families/qwen3_vl.h"

namespace vlm::server_cli {
namespace {

// The 8-bit media form only where the CUDA backend's encoder preprocesses (the engine resolves
// --device auto the same way; under tensor parallelism too: each encoder GPU preprocesses).
bool gpu_preprocess(const MediaFlags& mf, const EngineConfig& ec) {
  return mf.gpu_preprocess && (ec.device == Device::Cuda || (ec.device == Device::Auto && cuda_available()));
}

// Reads every page of the mapped weights once, with a progress bar: the first requests then
// do not pay for page faults, and a truncated or unreadable file shows up now.
void warm_weights(const LlmDecoder& decoder) {
  const auto& tensors = decoder.weights().tensors();
  int64_t total = 0, done = 0;
  for (const auto& [name, t] : tensors) total += t.nbytes();
  const bool tty = isatty(2);
  int last_pct = -1;
  volatile unsigned char sink = 0;
  for (const auto& [name, t] : tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    for (int64_t i = 0; i < t.nbytes(); i += 4096) sink = sink + p[i];
    done += t.nbytes();
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    if (pct != last_pct && (tty || pct == 100)) {
      const int bar = pct / 4;
      std::fprintf(stderr, "\rloading weights [%.*s%*s] %3d%% (%.1f MiB)", bar, "#########################", 25 - bar, "",
                   pct, static_cast<double>(done) / (1 << 20));
      last_pct = pct;
    }
  }
  std::fprintf(stderr, "\n");
}

// A Qwen2-VL-family processor's patch / merge / temporal sizes must be its vision tower's.
template <class Processor, class VisionConfig>
void check_patch_sizes(const std::string& model_dir, const char* what, const Processor& p, const VisionConfig& vc) {
  if (p.patch_size != vc.patch_size || p.merge_size != vc.spatial_merge_size ||
      p.temporal_patch_size != vc.temporal_patch_size)
    throw LoadError(fmt::format("{}: the {}'s patch/merge/temporal sizes {}/{}/{} are not the vision tower's {}/{}/{}",
                                model_dir, what, p.patch_size, p.merge_size, p.temporal_patch_size, vc.patch_size,
                                vc.spatial_merge_size, vc.temporal_patch_size));
}

}  // namespace

std::unique_ptr<Engine> load_served_model(const std::string& model_dir, const WeightLoadOptions& load,
                                          const EngineConfig& ec, const MediaFlags& mf,
                                          std::shared_ptr<const Tokenizer> tokenizer, ApiServerOptions& api) {
  auto serve = [&](std::unique_ptr<Model> model) {
    return std::make_unique<Engine>(ec, std::move(model), make_text_decoder_factory(tokenizer));
  };
  switch (detect_architecture(model_dir)) {
    case ModelArchitecture::CausalLM: {
      auto decoder = LlmDecoder::load(model_dir, load);
      warm_weights(*decoder);
      return std::make_unique<Engine>(ec, std::move(decoder), make_text_decoder_factory(tokenizer));
    }
    case ModelArchitecture::Llava: {
      auto model = LlavaModel::load(model_dir, load);
      warm_weights(model->decoder());
      ImageInputOptions images;
      images.preprocess = ImagePreprocessConfig::load(model_dir);
      images.image_token_id = model->image_token_id();
      images.tokens_per_image = model->tokens_per_image();
      const auto [h, w] = images.preprocess.output_size_for(1, 1);
      if (h != model->image_size() || w != model->image_size())
        throw LoadError(fmt::format("{}: the image processor's images come out {}x{}, the vision tower takes {}x{}",
                                    model_dir, h, w, model->image_size(), model->image_size()));
      api.images = images;
      return serve(std::move(model));
    }
    case ModelArchitecture::Qwen2VL: {
      auto model = Qwen2VLModel::load(model_dir, load);
      warm_weights(model->decoder());
      Qwen2VLMediaOptions media;
      media.image = Qwen2VLPreprocessConfig::load(model_dir, /*video=*/false);
      media.video = Qwen2VLPreprocessConfig::load(model_dir, /*video=*/true);
      media.image_token_id = model->image_token_id();
      media.video_token_id = model->video_token_id();
      media.max_video_frames = mf.max_video_frames;
      media.video_total_pixels = mf.video_total_pixels;
      media.sampling = VideoSamplingParams::load(model_dir);
      media.video_limits = mf.video_limits;
      media.gpu_preprocess = gpu_preprocess(mf, ec);
      for (const auto* p : {&media.image, &media.video})
        check_patch_sizes(model_dir, "preprocessor", *p, model->config().vision);
      api.qwen2vl = media;
      return serve(std::move(model));
    }
    case ModelArchitecture::Qwen3VL: {
      auto model = Qwen3VLModel::load(model_dir, load);
      warm_weights(model->decoder());
      // Images as Qwen2VLImageProcessor with the checkpoint's 16-px settings, videos as
      // Qwen3VLVideoProcessor (timestamps per temporal group); in the 8-bit form where the CUDA
      // backend's encoder preprocesses (as Qwen2-VL's), else as rows.
      Qwen3VLMediaOptions media;
      media.gpu_preprocess = gpu_preprocess(mf, ec);
      media.image.image = Qwen2VLPreprocessConfig::load(model_dir, /*video=*/false);
      media.image.video = media.image.image;
      media.image.image_token_id = model->image_token_id();
      media.image.video_token_id = model->video_token_id();
      media.video = Qwen3VLVideoConfig::load(model_dir);
      media.max_video_frames = mf.max_video_frames;
      media.video_limits = mf.video_limits;
      for (const auto* p : {&media.image.image, &media.video.base})
        check_patch_sizes(model_dir, "processor", *p, model->config().vision);
      api.qwen3vl = media;
      return serve(std::move(model));
    }
    case ModelArchitecture::LlavaOnevision: {
      auto model = LlavaOnevisionModel::load(model_dir, load);
      warm_weights(model->decoder());
      OnevisionMediaOptions media;
      media.image = OnevisionPreprocessConfig::load(model_dir, /*video=*/false);
      media.video = OnevisionPreprocessConfig::load(model_dir, /*video=*/true);
      media.image_token_id = model->image_token_id();
      media.video_token_id = model->video_token_id();
      media.grid = model->grid();
      media.max_num_patches = model->config().max_num_patches;
      media.max_video_frames = mf.max_video_frames;
      for (const auto* p : {&media.image, &media.video})
        if (p->size != model->tile_size())
          throw LoadError(fmt::format("{}: the processor makes {}px tiles, the vision tower takes {}px", model_dir,
                                      p->size, model->tile_size()));
      api.onevision = media;
      return serve(std::move(model));
    }
  }
  throw InternalError("load_served_model: an architecture without a case");
}

}  // namespace vlm::server_cli
