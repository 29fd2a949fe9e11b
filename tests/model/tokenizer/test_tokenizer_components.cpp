// The tokenizer's phases one at a time, from hand-written tokenizer.json fragments: normalizers,
// pre-tokenizers (every Split behavior, invert, ByteLevel, Metaspace), decoders and
// post-processors; unsupported component types are load errors naming the type.
// Expected values follow the documented behavior of Hugging Face tokenizers (e.g. the
// SplitDelimiterBehavior example "the-final--countdown").
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/tokenizer/components/normalizer.h"
#include "model/tokenizer/components/post_processor.h"
#include "model/tokenizer/components/pre_tokenizer.h"
#include "model/tokenizer/components/token_decoder.h"

namespace vlm {
namespace {

using nlohmann::json;
using Strings = std::vector<std::string>;

std::string normalize(const json& j, std::string text) {
  Normalizer::from_json(j, "t.json")->normalize(text);
  return text;
}

Strings pre_tokenize(const json& j, const std::string& text, bool at_start = true) {
  std::vector<PreToken> pieces{{text, at_start}};
  PreTokenizer::from_json(j, "t.json")->pre_tokenize(pieces);
  Strings out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

std::string decode(const json& j, Strings tokens) {
  TokenDecoder::from_json(j, "t.json")->decode_chain(tokens);
  std::string s;
  for (const auto& t : tokens) s += t;
  return s;
}

json split(const char* behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
}

TEST(Normalizer, UnicodeFormsCaseStripAndReplace) {
  EXPECT_EQ(normalize({{"type", "NFC"}}, "cafe\xCC\x81"), "caf\xC3\xA9");
  EXPECT_EQ(normalize({{"type", "NFD"}}, "caf\xC3\xA9"), "cafe\xCC\x81");
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");  // U+FB01 ligature
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "HeLLo \xC3\x89"), "hello \xC3\xA9");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \t a b \n"), "a b \n");
  EXPECT_EQ(normalize({{"type", "Strip"}}, "\xE3\x80\x80 x \xC2\xA0"), "x");  // ideographic space, NBSP
  EXPECT_EQ(normalize({{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "StripAccents"}}}}},
                      "r\xC3\xA9sum\xC3\xA9"),
            "resume");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "_"}}, "a  b\tc"), "a_b_c");
}

TEST(Normalizer, SentencePiecePrependAndReplace) {
  const json llama2 = json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})");
  EXPECT_EQ(normalize(llama2, "Hello world"), "▁Hello▁world");
  EXPECT_EQ(normalize(llama2, " x"), "▁▁x");
  EXPECT_EQ(normalize(llama2, ""), "");  // Prepend leaves empty text alone
}

TEST(PreTokenizer, SplitBehaviors) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(pre_tokenize(split("Removed"), text), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(pre_tokenize(split("Isolated"), text), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithPrevious"), text), (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithNext"), text), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pre_tokenize(split("Contiguous"), text), (Strings{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(pre_tokenize(split("Removed", true), text), (Strings{"-", "-", "-"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithPrevious", true), text), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pre_tokenize(split("Isolated"), "-"), (Strings{"-"}));
  EXPECT_EQ(pre_tokenize(split("Removed"), "--"), Strings{});
}

TEST(PreTokenizer, UnicodeRegexWithLookahead) {
  // Llama-3's pattern: contractions, letters with one leading non-letter, 1-3 digits, ...
  const json llama3 = {{"type", "Split"},
                       {"pattern", {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                       {"behavior", "Isolated"}};
  EXPECT_EQ(pre_tokenize(llama3, "Hello  world"), (Strings{"Hello", " ", " world"}));
  EXPECT_EQ(pre_tokenize(llama3, "I'LL pay 12345!!\n\nok"),
            (Strings{"I", "'LL", " pay", " ", "123", "45", "!!\n\n", "ok"}));
  EXPECT_EQ(pre_tokenize(llama3, "\xC3\xA9t\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87"),  // "été 中文"
            (Strings{"\xC3\xA9t\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87"}));
}

TEST(PreTokenizer, ByteLevelMapsBytesToPrintableCharacters) {
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}, "Hello world"),
            (Strings{"ĠHello", "Ġworld"}));
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}, "a b\n\xC3\xA9"),
            (Strings{"aĠbĊÃ©"}));
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}, "it's  2"),
            (Strings{"it", "'s", "Ġ", "Ġ2"}));
}

TEST(PreTokenizer, Metaspace) {
  const json always = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(pre_tokenize(always, "Hey friend!"), (Strings{"▁Hey", "▁friend!"}));
  EXPECT_EQ(pre_tokenize(always, "Hey   friend!"), (Strings{"▁Hey", "▁", "▁", "▁friend!"}));
  const json first = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  EXPECT_EQ(pre_tokenize(first, "Hey you", true), (Strings{"▁Hey▁you"}));
  EXPECT_EQ(pre_tokenize(first, "how are", false), (Strings{"how▁are"}));
  EXPECT_EQ(pre_tokenize(first, " Hey", true), (Strings{"▁Hey"}));
  const json legacy = {{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", false}};
  EXPECT_EQ(pre_tokenize(legacy, "a b"), (Strings{"a", "▁b"}));
}

TEST(PreTokenizer, SequenceDigitsAndWhitespace) {
  const json seq = {{"type", "Sequence"},
                    {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(pre_tokenize(seq, " ab12  c3 "), (Strings{"ab", "1", "2", "c", "3"}));
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", false}}, "a123b4"), (Strings{"a", "123", "b", "4"}));
  EXPECT_EQ(pre_tokenize({{"type", "Whitespace"}}, "Hey, you!"), (Strings{"Hey", ",", "you", "!"}));
}

TEST(TokenDecoder, SentencePieceChain) {
  const json llama2 = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})");
  EXPECT_EQ(decode(llama2, {"▁Hello", "▁world"}), "Hello world");
  EXPECT_EQ(decode(llama2, {"▁", "▁x"}), " x");
  EXPECT_EQ(decode(llama2, {"<0xC3>", "<0xA9>", "t", "<0xC3>", "<0xA9>"}), "\xC3\xA9t\xC3\xA9");
  // Bytes that do not form UTF-8: one U+FFFD per byte.
  EXPECT_EQ(decode(llama2, {"a", "<0xE4>", "<0xB8>", "b"}), "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");
  EXPECT_EQ(decode({{"type", "Strip"}, {"content", "x"}, {"start", 2}, {"stop", 1}}, {"xxxaxx", "ax"}), "xaxa");
}

TEST(TokenDecoder, ByteLevelAndMetaspace) {
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"ĠHello", "Ġw", "orld", "Ċ"}), " Hello world\n");
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"Ã", "©"}), "\xC3\xA9");
  // An incomplete sequence: one U+FFFD for the maximal invalid subsequence.
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"a", "ä¸"}), "a\xEF\xBF\xBD");
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"<|im_end|>"}), "<|im_end|>");
  const json ms = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(decode(ms, {"▁Hey", "▁friend!"}), "Hey friend!");
  EXPECT_EQ(decode({{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}}, {"▁Hey", "▁x"}),
            " Hey x");
  EXPECT_EQ(decode({{"type", "BPEDecoder"}, {"suffix", "</w>"}}, {"hel", "lo</w>", "you</w>"}), "hello you");
}

TEST(PostProcessor, TemplateAndWrappers) {
  const json tp = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                     "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}})");
  std::vector<int32_t> ids{7, 8};
  PostProcessor::from_json(tp, "t.json")->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 7, 8, 2}));
  ids = {5};
  PostProcessor::from_json({{"type", "RobertaProcessing"}, {"cls", {"<s>", 0}}, {"sep", {"</s>", 2}}}, "t.json")->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 5, 2}));
  ids = {5};
  PostProcessor::from_json(json::parse(R"({"type": "Sequence", "processors": [{"type": "ByteLevel"}]})"), "t.json")
      ->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{5}));
}

std::string load_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const LoadError& e) {
    return e.what();
  }
  return "(no LoadError)";
}

TEST(TokenizerComponents, UnsupportedTypesAreLoadErrorsNamingTheType) {
  EXPECT_EQ(load_error([] { Normalizer::from_json({{"type", "Precompiled"}}, "dir/tokenizer.json"); })
                .find("dir/tokenizer.json: normalizer type 'Precompiled' is not supported"),
            0u);
  EXPECT_EQ(load_error([] { PreTokenizer::from_json({{"type", "BertPreTokenizer"}}, "t.json"); })
                .find("t.json: pre_tokenizer type 'BertPreTokenizer' is not supported"),
            0u);
  EXPECT_EQ(load_error([] { TokenDecoder::from_json({{"type", "CTC"}}, "t.json"); })
                .find("t.json: decoder type 'CTC' is not supported"),
            0u);
  EXPECT_EQ(load_error([] { PostProcessor::from_json({{"type", "Fancy"}}, "t.json"); })
                .find("t.json: post_processor type 'Fancy' is not supported"),
            0u);
  EXPECT_NE(load_error([] { PreTokenizer::from_json(split("Sideways"), "t.json"); }).find("unknown behavior"),
            std::string::npos);
  EXPECT_NE(load_error([] {
              PreTokenizer::from_json({{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
                                      "t.json");
            }).find("does not compile"),
            std::string::npos);
}

}  // namespace
}  // namespace vlm
