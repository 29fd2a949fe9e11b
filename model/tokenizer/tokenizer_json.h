// Reading a Hugging Face tokenizer: tokenizer.json (normalizer, pre_tokenizer, model,
// post_processor, decoder, added_tokens) and, when present, tokenizer_config.json (bos_token,
// eos_token, add_bos_token, add_eos_token, added_tokens_decoder).
//
// tokenizer_config.json rules (those of transformers' fast Llama tokenizers):
//  - bos_token / eos_token: a string, an {"content": ...} object, or null.
//  - add_bos_token / add_eos_token: when either key is present, the post-processor becomes
//    [bos if add_bos_token] sequence [eos if add_eos_token] (a missing key counts as false);
//    when neither is present, tokenizer.json's post_processor is used as it is.
//  - added_tokens_decoder entries whose id tokenizer.json does not already list are added.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "model/tokenizer/added_vocabulary.h"
#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/components/normalizer.h"
#include "model/tokenizer/components/post_processor.h"
#include "model/tokenizer/components/pre_tokenizer.h"
#include "model/tokenizer/components/token_decoder.h"

namespace vlm {

struct TokenizerParts {
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null: the whole text is one word
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;  // may be null
  std::unique_ptr<TokenDecoder> decoder;          // may be null: tokens joined with spaces
  AddedVocabulary added;
  std::string bos_token, eos_token;  // "" when none
};

// Builds the parts from the parsed files; `config` may be null. `source` names tokenizer.json
// and `config_source` tokenizer_config.json in error messages. Throws LoadError.
TokenizerParts parse_tokenizer_parts(const nlohmann::json& tokenizer, const nlohmann::json* config,
                                     const std::string& source, const std::string& config_source);

// Reads DIR/tokenizer.json and, if it exists, DIR/tokenizer_config.json. Throws LoadError naming
// the file that cannot be read or parsed, or the unsupported component.
TokenizerParts load_tokenizer_parts(const std::string& model_dir);

}  // namespace vlm
