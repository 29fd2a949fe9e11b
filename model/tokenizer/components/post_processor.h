// Post-processors of tokenizer.json ("post_processor"), single-sequence form: TemplateProcessing
// (SpecialToken / Sequence "A" items), BertProcessing and RobertaProcessing (cls A sep),
// ByteLevel (no effect on ids) and Sequence. They run only when special tokens are asked for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace vlm {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Wraps the ids of one sequence in the special tokens.
  virtual void process(std::vector<int32_t>& ids) const = 0;

  // Builds the post-processor described by `j`; null gives nullptr. Throws LoadError
  // "source: post_processor type 'X' is not supported" for an unknown type, and for bad fields
  // (a template naming a special token the template does not define, ...).
  static std::unique_ptr<PostProcessor> from_json(const nlohmann::json& j, const std::string& source);
  // `prefix` ids, the sequence, then `suffix` ids (what add_bos_token / add_eos_token make).
  static std::unique_ptr<PostProcessor> wrap(std::vector<int32_t> prefix, std::vector<int32_t> suffix);
};

}  // namespace vlm
