// ApiServer: the OpenAI-style endpoints over an EngineLoop, registered on a Router.
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
//   POST /tokenize, POST /detokenize, GET /metrics, GET /version.
// Chat messages may hold image_url parts when the model takes images (options.images: LLaVA;
// options.qwen2vl: the Qwen2-VL family; options.onevision: LLaVA-OneVision): data: URLs and
// http(s)/file URLs as options.media allows, at most max_images_per_request. With
// options.qwen2vl or options.onevision they may also hold videos as
// frame lists: {"type": "video_url", "video_url": {"url": [frame URLs], "fps": F}} (or
// "video_url": [frame URLs], fps on the part) and Qwen's {"type": "video", "video": [...]};
// fps (default 24, as HF assumes for bare frames) is the rate of the given frames; see server/media/qwen2vl_media_loader.h.
// A single URL there is a video file (MP4/MOV, WebM/MKV, GIF), sampled at "fps" (or
// "num_frames", with "min_frames"/"max_frames") over the checkpoint's video processor defaults.
// Messages reach the chat template in the shape it reads (server/chat_messages.h: content as a
// string or as parts, null content, tool results, developer messages).
// Handlers parse JSON into native requests (server/openai_request), tokenize (chat template
// first for chat), submit to the engine, and answer with a CompletionStream (stream: true) or a
// CompletionCollector (a deferred whole response). Errors use the OpenAI envelope.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/engine_loop.h"
#include "engine/media_inputs.h"
#include "engine/structured/constraint_cache.h"
#include "model/chat/chat_template.h"
#include "model/tokenizer/incremental_detokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/media/image_decode.h"
#include "model/media/image_preprocess.h"
#include "model/decoder/modality.h"
#include "server/media/image_loader.h"
#include "server/media/onevision_media_loader.h"
#include "server/media/qwen2vl_media_loader.h"
#include "server/media/qwen3vl_media_loader.h"
#include "server/media/media_fetch.h"
#include "server/media/processed_media_cache.h"
#include "server/media_workers.h"
#include "server/chat_messages.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/request_timeline.h"
#include "server/http/router.h"

namespace vlm {

// How a multimodal model takes images: the chat template renders one placeholder token per
// image part, which expands to tokens_per_image tokens tagged image k.
struct ImageInputOptions {
  ImagePreprocessConfig preprocess;  // the checkpoint's preprocessor_config.json
  int32_t image_token_id = 0;
  int64_t tokens_per_image = 0;
};

struct ApiServerOptions {
  std::string served_model_name;  // the id clients send as "model"
  std::string model_root;         // the checkpoint directory (reported as "root")
  std::string api_key;            // "" = no authentication
  MediaFetchOptions media;
  std::optional<ImageInputOptions> images;  // LLaVA; none (and no qwen2vl): image parts are a 400
  std::optional<Qwen2VLMediaOptions> qwen2vl;  // the Qwen2-VL family: images and videos
  std::optional<OnevisionMediaOptions> onevision;  // LLaVA-OneVision: images (AnyRes) and videos
  std::optional<Qwen3VLMediaOptions> qwen3vl;  // Qwen3-VL: images, videos with timestamps per group
  int max_images_per_request = 8;
  int max_videos_per_request = 4;
  ImageLimits image_limits;       // encoded bytes and decoded pixels of one image
  // Processed media cache (server/media/processed_media_cache.h): preprocessed images kept by
  // their bytes' hash, LRU within this many pixel bytes; 0: off (--mm-processor-cache-gb).
  int64_t mm_processor_cache_bytes = 4ll << 30;
  int heartbeat_ms = 5000;
  // How chat messages' content reaches the template (server/chat_messages.h): nullopt (auto)
  // detects it from the template (model/chat/chat_content_format.h); --chat-template-content-format.
  std::optional<ChatContentFormat> chat_content_format;
  // Chat requests with media run their whole handler (fetch, decode, preprocess, submit) on this
  // many media worker threads (server/media_workers.h), off the HTTP I/O threads; at most
  // media_queue more wait, beyond that a 503 with Retry-After. 0 workers: on the I/O threads
  // (--media-workers, --media-queue).
  int media_workers = 2;
  int media_queue = 16;
};

class ApiServer {
 public:
  // tokenizer / chat_template may be null: text prompts and chat are then refused with a 400.
  ApiServer(ApiServerOptions options, EngineLoop& engine, std::shared_ptr<const Tokenizer> tokenizer,
            std::optional<ChatTemplate> chat_template, SamplingDefaults defaults);

  void register_routes(Router& router);
  // While the model loads: every request answers 503 "model is loading" (OpenAI envelope) with
  // Retry-After, on any path and method (the router's fallback).
  static void register_loading_routes(Router& router);
  void set_ready(bool ready) { ready_ = ready; }
  void set_draining(bool draining) { draining_ = draining; }
  MetricsRegistry& metrics() { return metrics_; }
  ProcessedMediaCache::Stats media_cache_stats() const { return media_cache_->stats(); }

 private:
  HttpReply chat(const HttpRequest& req);
  // chat() on a media worker when the body names media (image_url, video_url, "image", "video"),
  // else on the calling thread; 503 when the media workers and their queue are full.
  HttpReply chat_offloaded(const HttpRequest& req);
  HttpReply completions(const HttpRequest& req);
  HttpReply models(const HttpRequest& req) const;
  HttpReply health(const HttpRequest& req) const;
  HttpReply tokenize(const HttpRequest& req) const;
  HttpReply detokenize(const HttpRequest& req) const;
  HttpReply metrics_text(const HttpRequest& req);
  HttpReply reset_prefix_cache(const HttpRequest& req);  // POST /reset_prefix_cache (vLLM)

  // 401 / 503 / 415 / 404 checks shared by the generation endpoints; throws RequestError.
  void admit(const HttpRequest& req, const std::string& model, bool json_body = true) const;
  const Tokenizer& need_tokenizer(const std::string& what) const;
  ChatMessagesOptions chat_messages_options() const;  // with a chat template; logs the format
  // One prompt for the engine: token ids (image placeholders expanded), their modality tags
  // (empty: all text) and the images.
  struct PromptInput {
    std::vector<int32_t> ids;
    std::vector<ModalityTag> modalities;
    std::vector<MediaPixels> images;  // images and videos, prompt order
    std::vector<BlockHash> media_keys;  // [images.size()] media_item_key of each, or empty
  };
  // Renders the chat template and tokenizes; with media, expands the placeholders and (when
  // load_images, and always for the families with a MediaItemLoader, whose token counts depend
  // on the sizes)
  // fetches, decodes and preprocesses the images and videos. Throws RequestError (400).
  // tl: laps of the template, tokenizer and media (none when null).
  PromptInput render_chat(const ApiRequest& r, bool load_images, RequestTimeline* tl = nullptr) const;
  // Appends a loaded image (and its key, when it has one) to `in`; complete_media_keys gives the
  // items after the last image their keys when any item has one.
  static void add_image(PromptInput& in, LoadedImage image);
  static void complete_media_keys(PromptInput& in);
  HttpReply respond(const ApiRequest& r, std::vector<PromptInput> prompts,
                    std::vector<std::string> echo_prefix, const std::string& id_prefix, RequestTimeline tl);
  void record_outcome(const struct CompletionOutcome& o, double e2e_s, int64_t num_prompt_tokens);
  // Compiles r.constraint (cached) into r.params.constraint. Throws RequestError(400) naming the
  // keyword or syntax the constraint does not support.
  void compile_constraint(ApiRequest& r);

  ApiServerOptions options_;
  EngineLoop& engine_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::optional<ImageLoader> image_loader_;
  std::unique_ptr<MediaItemLoader> media_loader_;  // qwen2vl or onevision: images and videos
  std::unique_ptr<ProcessedMediaCache> media_cache_;  // images, by their bytes (thread-safe)
  SamplingDefaults defaults_;
  std::unique_ptr<structured::ConstraintCache> constraints_;  // with a tokenizer
  ToolCallFormat tool_format_ = ToolCallFormat::Hermes;      // from the chat template
  ChatMessagesOptions chat_messages_;                        // content format, placeholders
  MetricsRegistry metrics_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{0};
  std::mutex metrics_mu_;  // /metrics brings the engine's counters up to date one caller at a time
  // Last: destroyed first, joining jobs that use the members above.
  std::unique_ptr<MediaWorkers> media_workers_;  // with media input and media_workers > 0
};

// The tokenizer as the engine's text decoder factory (incremental detokenization).
std::shared_ptr<const TextDecoderFactory> make_text_decoder_factory(std::shared_ptr<const Tokenizer> tokenizer);

}  // namespace vlm
