// ApiServer's prompt phase: the chat request's messages and media -> token ids, media items and
// their prefix-cache keys (render_chat, add_image, complete_media_keys). Split from api_server.cpp
// by phase; the routes and the reply phase stay there.
#include "server/api_server.h"

#include <algorithm>

#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/scheduling/block_hash.h"
#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "model/families/multimodal_input.h"

namespace vlm {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message, int status = 400,
                      const std::string& type = "invalid_request_error") {
  throw RequestError(status, type, message, param);
}

}  // namespace

const Tokenizer& ApiServer::need_tokenizer(const std::string& what) const {
  if (!tokenizer_) bad("", what + " needs a tokenizer, and the model directory has no tokenizer.json");
  return *tokenizer_;
}

namespace {

// One image or video part of a chat request, in message order.
struct MediaPart {
  Modality modality = Modality::Image;
  std::vector<std::string> urls;  // image: one; video: one per frame
  bool video_file = false;        // video given as one URL (a video file)
  // video: frames per second of the given frames. Without an fps, HF's default for frames that
  // come without video metadata (transformers 5.17 VideoMetadata.sampled_fps: `self.fps or 24`).
  double fps = 24.0;
  std::string param;              // e.g. messages[0].content[1].video_url
  VideoSamplingParams sampling;   // video file: the request's fps / num_frames / min, max frames
};

// The sampling keys of a video file's part ({"url", "fps", "num_frames", "min_frames",
// "max_frames"} in video_url, or on the part) over the model's defaults.
VideoSamplingParams file_sampling(const nlohmann::ordered_json& part, const nlohmann::ordered_json& v,
                                  VideoSamplingParams p) {
  for (const auto* holder : {&part, &v}) {
    if (!holder->is_object()) continue;
    const auto& h = *holder;
    if (h.contains("fps")) {
      p.fps = h["fps"].get<double>();
      p.num_frames.reset();
    }
    if (h.contains("num_frames")) {
      p.num_frames = h["num_frames"].get<int64_t>();
      p.fps.reset();
    }
    if (h.contains("min_frames")) p.min_frames = h["min_frames"].get<int64_t>();
    if (h.contains("max_frames")) p.max_frames = h["max_frames"].get<int64_t>();
  }
  return p;
}

// video_url / video part -> its frame URLs and fps (parse_api_request validated the shapes).
MediaPart video_part(const nlohmann::ordered_json& part, const std::string& type, const std::string& param,
                     const VideoSamplingParams& defaults) {
  MediaPart m;
  m.modality = Modality::Video;
  m.param = param;
  const auto& v = part[type];
  const auto& u = v.is_object() ? v["url"] : v;
  if (u.is_string()) {
    m.urls.push_back(u.get<std::string>());
    m.video_file = true;
  } else {
    for (const auto& e : u) m.urls.push_back(e.get<std::string>());
  }
  if (v.is_object() && v.contains("fps")) m.fps = v["fps"].get<double>();
  else if (part.contains("fps")) m.fps = part["fps"].get<double>();
  if (m.video_file) m.sampling = file_sampling(part, v, defaults);
  return m;
}

// A chat template may render a message's media in another order than its parts (HF's
// LLaVA-OneVision template writes a message's images, then its videos): with one placeholder
// token per part, the parts are taken in the placeholders' order (the k-th image placeholder is
// the k-th image part). Any other count leaves the order as it is (expand_media_tokens judges).
std::vector<MediaPart> in_placeholder_order(std::vector<MediaPart> parts, const std::vector<int32_t>& ids,
                                            int32_t image_id, int32_t video_id) {
  std::vector<Modality> seen;
  for (int32_t id : ids)
    if (id == image_id || id == video_id) seen.push_back(id == video_id ? Modality::Video : Modality::Image);
  if (seen.size() != parts.size()) return parts;
  std::vector<MediaPart> out;
  size_t next[2] = {0, 0};  // next part of each modality (image, video)
  for (Modality m : seen) {
    size_t& i = next[m == Modality::Video];
    while (i < parts.size() && parts[i].modality != m) ++i;
    if (i == parts.size()) return parts;
    out.push_back(parts[i++]);
  }
  return out;
}

// A family that writes videos as text-separated temporal groups (MediaItemLoader::video_groups,
// Qwen3-VL): each video's single placeholder becomes its groups, each as "before" + one video
// placeholder + "after" (tokenized without BOS), and the video item its group items. A prompt whose
// placeholders are not one per item (already expanded) is left for expand_media_tokens to judge.
void split_video_groups(std::vector<int32_t>& ids, std::vector<MediaPixels>& media, std::vector<BlockHash>& keys,
                        std::vector<MediaTokens>& items, const MediaItemLoader& loader, const Tokenizer& tok) {
  const int32_t image_id = loader.image_token_id(), video_id = loader.video_token_id();
  const auto placeholders = std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return id == image_id || id == video_id; });
  if (placeholders != static_cast<std::ptrdiff_t>(media.size())) return;
  std::vector<int32_t> out_ids;
  std::vector<MediaPixels> out_media;
  std::vector<BlockHash> out_keys;
  std::vector<MediaTokens> out_items;
  size_t k = 0;
  for (int32_t id : ids) {
    if (id != image_id && id != video_id) {
      out_ids.push_back(id);
      continue;
    }
    std::vector<MediaItemLoader::VideoGroup> groups;
    if (media[k].modality == Modality::Video) groups = loader.video_groups(media[k]);  // takes it apart when it splits
    if (groups.empty()) {
      out_ids.push_back(id);
      out_media.push_back(std::move(media[k]));
      if (!keys.empty()) out_keys.push_back(keys[k]);
      out_items.push_back(items[k]);
    } else {
      for (MediaItemLoader::VideoGroup& g : groups) {
        for (int32_t t : tok.encode(g.before, /*add_special_tokens=*/false)) out_ids.push_back(t);
        out_ids.push_back(video_id);
        for (int32_t t : tok.encode(g.after, /*add_special_tokens=*/false)) out_ids.push_back(t);
        if (!keys.empty()) out_keys.push_back(media_item_key(g.item));
        out_items.push_back(loader.tokens(g.item));
        out_media.push_back(std::move(g.item));
      }
    }
    ++k;
  }
  ids = std::move(out_ids);
  media = std::move(out_media);
  keys = std::move(out_keys);
  items = std::move(out_items);
}

}  // namespace

ApiServer::PromptInput ApiServer::render_chat(const ApiRequest& r, bool load_images, RequestTimeline* tl) const {
  const Tokenizer& tok = need_tokenizer("chat");
  if (!chat_template_) bad("messages", "the model has no chat template; use /v1/completions");
  // Image parts become {"type": "image"}, video parts {"type": "video"} for the template (as
  // Hugging Face's templates expect); their URLs are kept in order.
  nlohmann::ordered_json messages = r.messages;
  std::vector<MediaPart> parts;
  int num_images = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    auto& m = messages[i];
    if (!m.contains("content") || !m["content"].is_array()) continue;
    for (size_t k = 0; k < m["content"].size(); ++k) {
      auto& part = m["content"][k];
      const std::string type = part["type"].get<std::string>();
      if (type == "text") continue;
      const std::string param = fmt::format("messages[{}].content[{}].{}", i, k, type);
      if (type == "image_url") {
        if (!options_.images && !media_loader_) bad(param, "this model does not accept image_url input");
        const auto& u = part["image_url"];
        parts.push_back({Modality::Image, {u.is_string() ? u.get<std::string>() : u["url"].get<std::string>()}, false,
                         0.0, param});
        ++num_images;
        part = nlohmann::ordered_json{{"type", "image"}};
      } else if (type == "video_url" || type == "video") {
        if (!media_loader_ || !media_loader_->accepts_video())
          bad(param, "this model does not accept video input (" + type + ")");
        parts.push_back(video_part(part, type, param, media_loader_->default_sampling()));
        part = nlohmann::ordered_json{{"type", "video"}};
      } else {
        bad("messages", "this model does not accept " + type + " input");
      }
    }
  }
  if (num_images > options_.max_images_per_request)
    bad("messages", fmt::format("the request has {} images; at most {} are allowed per request", num_images,
                                options_.max_images_per_request));
  const int num_videos = static_cast<int>(parts.size()) - num_images;
  if (num_videos > options_.max_videos_per_request)
    bad("messages", fmt::format("the request has {} videos; at most {} are allowed per request", num_videos,
                                options_.max_videos_per_request));
  // The content as the template reads it, null content, tool calls' arguments as objects,
  // developer messages (server/chat_messages.h).
  messages = prepare_chat_messages(messages, chat_messages_);
  nlohmann::ordered_json context = r.chat_template_kwargs;
  context["add_generation_prompt"] = r.add_generation_prompt;
  if (!r.tools.tools.empty() && !context.contains("tools")) context["tools"] = r.tools.tools;
  ChatTemplate::add_tokenizer_defaults(context, tok, r.add_generation_prompt);
  std::string prompt = chat_template_->render(messages, context);
  if (tl) tl->template_ms = tl->lap();
  if (r.continue_final_message) {
    // Cut the rendering after the final message's text (as vLLM does).
    const std::string text = final_message_text(r.messages);
    const size_t at = text.empty() ? std::string::npos : prompt.rfind(text);
    if (at != std::string::npos) prompt.resize(at + text.size());
  }
  // HF processors' tokenization: BOS added unless the template wrote it (never two).
  PromptInput in;
  in.ids = tok.encode_chat(prompt);
  if (tl) tl->tokenize_ms = tl->lap();
  if (media_loader_) {
    // Token counts depend on each item's size: the media are always loaded.
    parts = in_placeholder_order(std::move(parts), in.ids, media_loader_->image_token_id(),
                                 media_loader_->video_token_id());
    std::vector<MediaTokens> items;
    for (const MediaPart& p : parts) {
      if (p.modality == Modality::Image) add_image(in, load_image_cached(*media_cache_, *media_loader_, p.urls[0], p.param));
      else if (p.video_file) in.images.push_back(media_loader_->load_video_file(p.urls[0], p.sampling, p.param));
      else in.images.push_back(media_loader_->load_video(p.urls, p.fps, p.param));
      items.push_back(media_loader_->tokens(in.images.back()));
    }
    complete_media_keys(in);
    split_video_groups(in.ids, in.images, in.media_keys, items, *media_loader_, tok);
    MultimodalPrompt mp = expand_media_tokens(in.ids, media_loader_->image_token_id(),
                                              media_loader_->video_token_id(), items);
    in.ids = std::move(mp.token_ids);
    if (!parts.empty()) in.modalities = std::move(mp.modalities);
    if (!load_images) {
      in.images.clear();
      in.media_keys.clear();
    }
    if (tl) tl->media_ms = tl->lap();
    return in;
  }
  if (!options_.images) return in;
  const ImageInputOptions& io = *options_.images;
  MultimodalPrompt mp = expand_image_tokens(in.ids, io.image_token_id, io.tokens_per_image,
                                            static_cast<int32_t>(parts.size()));
  in.ids = std::move(mp.token_ids);
  if (!parts.empty()) in.modalities = std::move(mp.modalities);
  if (load_images)
    for (const MediaPart& p : parts) add_image(in, load_image_cached(*media_cache_, *image_loader_, p.urls[0], p.param));
  if (tl) tl->media_ms = tl->lap();
  return in;
}

void ApiServer::add_image(PromptInput& in, LoadedImage image) {
  in.images.push_back(std::move(image.pixels));
  if (image.item_key) {
    // Keys from the cache: the items loaded before without one get theirs (the engine takes all
    // or none).
    while (in.media_keys.size() + 1 < in.images.size())
      in.media_keys.push_back(media_item_key(in.images[in.media_keys.size()]));
    in.media_keys.push_back(*image.item_key);
  }
}

void ApiServer::complete_media_keys(PromptInput& in) {
  if (in.media_keys.empty()) return;
  while (in.media_keys.size() < in.images.size()) in.media_keys.push_back(media_item_key(in.images[in.media_keys.size()]));
}

}  // namespace vlm
