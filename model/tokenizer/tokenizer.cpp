#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/tokenizer/components/byte_level.h"
#include "model/tokenizer/segment_cache.h"
#include "model/tokenizer/tokenizer_json.h"
#include "model/tokenizer/utf8.h"

namespace vlm {

Tokenizer::Tokenizer(std::unique_ptr<TokenizerParts> parts)
    : parts_(std::move(parts)), segments_(std::make_unique<SegmentCache>(kSegmentCacheBytes, kMinCachedSegmentBytes)) {
  bos_token_ = parts_->bos_token;
  eos_token_ = parts_->eos_token;
  if (!bos_token_.empty()) bos_id_ = token_to_id(bos_token_);
  if (!eos_token_.empty()) eos_id_ = token_to_id(eos_token_);
}

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir) {
  return std::unique_ptr<Tokenizer>(
      new Tokenizer(std::make_unique<TokenizerParts>(load_tokenizer_parts(model_dir))));
}

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json,
                                                std::string_view config_json,
                                                const std::string& source) {
  using nlohmann::json;
  auto parse = [](std::string_view text, const std::string& name) {
    try {
      return json::parse(text);
    } catch (const json::parse_error& e) {
      throw LoadError(name + ": invalid JSON: " + e.what());
    }
  };
  const json tok = parse(tokenizer_json, source);
  const std::string config_source = source + " (tokenizer_config)";
  std::optional<json> config;
  if (!config_json.empty()) config = parse(config_json, config_source);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::make_unique<TokenizerParts>(
      parse_tokenizer_parts(tok, config ? &*config : nullptr, source, config_source))));
}

std::vector<int32_t> Tokenizer::encode_chat(std::string_view prompt) const {
  const bool has_bos = !bos_token_.empty() && prompt.substr(0, bos_token_.size()) == bos_token_;
  return encode(prompt, /*add_special_tokens=*/!has_bos);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::to_valid_lossy(text);
    text = repaired;
  }
  const TokenizerParts& p = *parts_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedVocabulary::Segment> raw, inner;
  std::vector<PreToken> pieces;
  std::string normalized;
  p.added.split(text, /*normalized=*/false, raw);
  for (const auto& seg : raw) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string_view seg_text = text.substr(seg.begin, seg.end - seg.begin);
    const bool cache = segments_->keeps(seg_text);
    if (cache && segments_->lookup(seg_text, seg.begin == 0, ids)) continue;
    const size_t before = ids.size();
    normalized.assign(seg_text);
    if (p.normalizer) p.normalizer->normalize(normalized);
    inner.clear();
    p.added.split(normalized, /*normalized=*/true, inner);
    for (const auto& sub : inner) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
        continue;
      }
      pieces.clear();
      pieces.push_back({normalized.substr(sub.begin, sub.end - sub.begin), seg.begin == 0 && sub.begin == 0});
      if (p.pre_tokenizer) p.pre_tokenizer->pre_tokenize(pieces);
      for (const PreToken& piece : pieces) p.model->tokenize(piece.text, ids);
    }
    if (cache) segments_->insert(seg_text, seg.begin == 0, std::span<const int32_t>(ids).subspan(before));
  }
  if (add_special_tokens && p.post_processor) p.post_processor->process(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerParts& p = *parts_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* t = p.added.find(id)) {
      if (!(skip_special_tokens && t->special)) tokens.push_back(t->content);
    } else if (const std::string* s = p.model->id_to_token(id)) {
      tokens.push_back(*s);
    }
  }
  std::string text;
  if (p.decoder) {
    p.decoder->decode_chain(tokens);
    for (const std::string& t : tokens) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) text += ' ';
      text += tokens[i];
    }
  }
  return text;
}

int64_t Tokenizer::vocab_size() const {
  return std::max(parts_->model->num_ids(), parts_->added.num_ids());
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = parts_->added.token_to_id(token)) return id;
  return parts_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = parts_->added.find(id)) return t->content;
  if (const std::string* s = parts_->model->id_to_token(id)) return *s;
  return "";
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (const AddedToken* t = parts_->added.find(id)) return t->content;
  const std::string* s = parts_->model->id_to_token(id);
  if (!s) return "";
  std::string out;
  if (parts_->decoder && parts_->decoder->byte_level()) {
    size_t i = 0;
    while (i < s->size()) {
      const size_t at = i;
      const int b = byte_level::byte_of(utf8::next(*s, i));
      if (b < 0) out.append(*s, at, i - at);
      else out.push_back(static_cast<char>(b));
    }
    return out;
  }
  if (s->size() == 6 && s->starts_with("<0x") && (*s)[5] == '>' && std::isxdigit(static_cast<unsigned char>((*s)[3])) &&
      std::isxdigit(static_cast<unsigned char>((*s)[4])))
    return std::string(1, static_cast<char>(std::stoi(s->substr(3, 2), nullptr, 16)));
  static const std::string kSpace = "\u2581";
  for (size_t i = 0; i < s->size();) {
    if (s->compare(i, kSpace.size(), kSpace) == 0) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back((*s)[i++]);
    }
  }
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* t = parts_->added.find(id);
  return t && t->special;
}

void Tokenizer::clear_cache() const {
  parts_->model->clear_cache();
  segments_->clear();
}

size_t Tokenizer::num_cached_segments() const { return segments_->size(); }

}  // namespace vlm
