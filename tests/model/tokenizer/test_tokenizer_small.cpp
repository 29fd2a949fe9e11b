// Whole tokenizers built from small hand-written tokenizer.json texts: BPE merges in both forms
// and their ranks, ignore_merges, subword prefix / word suffix, unk and fuse_unk, byte_fallback;
// added tokens (lstrip, rstrip, single_word, normalized); tokenizer_config.json add_bos/add_eos;
// load errors naming the file and the type; streaming detokenization corner cases.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/tokenizer/components/byte_level.h"
#include "model/tokenizer/incremental_detokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace vlm {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

json vocab_of(const std::vector<std::string>& tokens) {
  json v = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) v[tokens[i]] = i;
  return v;
}

json bpe(const std::vector<std::string>& tokens, const json& merges) {
  return {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab_of(tokens)},
          {"merges", merges}};
}

std::unique_ptr<Tokenizer> make(const json& model, const json& extra = json::object(),
                                const std::string& config = "") {
  json t = {{"version", "1.0"}, {"added_tokens", json::array()}, {"normalizer", nullptr},
            {"pre_tokenizer", nullptr}, {"post_processor", nullptr}, {"decoder", nullptr}, {"model", model}};
  t.update(extra);
  return Tokenizer::from_json(t.dump(), config);
}

TEST(SmallTokenizer, MergesInStringAndPairFormsAgree) {
  const std::vector<std::string> v{"a", "b", "c", "ab", "abc"};
  auto s = make(bpe(v, {"a b", "ab c"}));
  auto p = make(bpe(v, json::parse(R"([["a", "b"], ["ab", "c"]])")));
  for (const char* text : {"abc", "cab", "abcabc", "ba"}) EXPECT_EQ(s->encode(text), p->encode(text)) << text;
  EXPECT_EQ(s->encode("abc"), (Ids{4}));
  EXPECT_EQ(s->encode("cab"), (Ids{2, 3}));
  // The pair form can hold tokens with spaces.
  auto spaced = make(bpe({"a", " ", "b", "a ", "a b"}, json::parse(R"([["a", " "], ["a ", "b"]])")));
  EXPECT_EQ(spaced->encode("a b"), (Ids{4}));
}

TEST(SmallTokenizer, LowerRankMergesFirstThenLeftmost) {
  const std::vector<std::string> v{"a", "b", "c", "ab", "bc"};
  EXPECT_EQ(make(bpe(v, {"b c", "a b"}))->encode("abc"), (Ids{0, 4}));
  EXPECT_EQ(make(bpe(v, {"a b", "b c"}))->encode("abc"), (Ids{3, 2}));
  // Equal pairs: leftmost first ("aaa" -> "aa" "a").
  EXPECT_EQ(make(bpe({"a", "aa"}, {"a a"}))->encode("aaa"), (Ids{1, 0}));
  EXPECT_EQ(make(bpe({"a", "aa"}, {"a a"}))->encode("aaaa"), (Ids{1, 1}));
}

TEST(SmallTokenizer, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json m = bpe({"a", "b", "c", "ab", "abc"}, {"a b"});
  EXPECT_EQ(make(m)->encode("abc"), (Ids{3, 2}));
  m["ignore_merges"] = true;
  EXPECT_EQ(make(m)->encode("abc"), (Ids{4}));
  EXPECT_EQ(make(m)->encode("cab"), (Ids{2, 3}));
}

TEST(SmallTokenizer, SubwordPrefixAndWordSuffix) {
  json m = bpe({"a", "##b", "##c</w>", "ab", "a</w>"}, {"a ##b"});
  m["continuing_subword_prefix"] = "##";
  m["end_of_word_suffix"] = "</w>";
  auto t = make(m);
  EXPECT_EQ(t->encode("abc"), (Ids{3, 2}));
  EXPECT_EQ(t->encode("a"), (Ids{4}));
}

TEST(SmallTokenizer, UnknownCharactersAndFuseUnk) {
  json m = bpe({"<unk>", "a"}, json::array());
  m["unk_token"] = "<unk>";
  EXPECT_EQ(make(m)->encode("axyaz"), (Ids{1, 0, 0, 1, 0}));
  m["fuse_unk"] = true;
  EXPECT_EQ(make(m)->encode("axyaz"), (Ids{1, 0, 1, 0}));
  m["unk_token"] = nullptr;  // no unk: unknown characters vanish
  EXPECT_EQ(make(m)->encode("axya"), (Ids{1, 1}));
}

json llama2_like_parts() {
  return json::parse(R"({
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "added_tokens": [
      {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}]})");
}

// Llama-2 style: "<unk>" "<s>" "</s>", bytes <0xC3> <0xA9> <0xE4> <0xB8> <0xAD>, then pieces.
std::unique_ptr<Tokenizer> llama2_like(const std::string& config = "") {
  json m = bpe({"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "<0xE4>", "<0xB8>", "<0xAD>", "▁", "H", "i", "▁H",
                "▁Hi", "t", "▁t", "h", "e", "r", "▁th", "▁the", "er", "▁ther", "▁there"},
               {"▁ H", "▁H i", "▁ t", "▁t h", "▁th e", "e r", "▁the r", "▁ther e"});
  m["unk_token"] = "<unk>";
  m["fuse_unk"] = true;
  m["byte_fallback"] = true;
  return make(m, llama2_like_parts(), config);
}

TEST(SmallTokenizer, SentencePieceStyleWithByteFallback) {
  auto t = llama2_like();
  EXPECT_EQ(t->encode("Hi there"), (Ids{1, 12, 22}));
  EXPECT_EQ(t->encode("Hi there", false), (Ids{12, 22}));
  EXPECT_EQ(t->encode("\xC3\xA9t", false), (Ids{8, 3, 4, 13}));  // "▁" <0xC3> <0xA9> "t"
  EXPECT_EQ(t->encode("x", false), (Ids{8, 0}));                 // no byte token for 'x': unk
  EXPECT_EQ(t->decode(Ids{1, 12, 22}), "<s> Hi there");
  EXPECT_EQ(t->decode(Ids{1, 12, 22}, true), "Hi there");
  EXPECT_EQ(t->decode(Ids{8, 3, 4, 13}), "\xC3\xA9t");
  EXPECT_EQ(t->decode(Ids{12, 5, 6}), "Hi\xEF\xBF\xBD\xEF\xBF\xBD");  // incomplete: U+FFFD per byte
  // Every piece between added tokens gets its own "▁".
  EXPECT_EQ(t->encode("Hi</s>there", false), (Ids{12, 2, 22}));
}

TEST(SmallTokenizer, TokenizerConfigAddBosAddEos) {
  EXPECT_EQ(llama2_like(R"({"bos_token": "<s>", "eos_token": "</s>"})")->encode("Hi"), (Ids{1, 12}));
  auto both = llama2_like(R"({"add_bos_token": true, "add_eos_token": true,
                              "bos_token": {"content": "<s>"}, "eos_token": "</s>"})");
  EXPECT_EQ(both->encode("Hi"), (Ids{1, 12, 2}));
  EXPECT_EQ(both->encode("Hi", false), (Ids{12}));
  EXPECT_EQ(both->bos_id(), 1);
  EXPECT_EQ(both->eos_id(), 2);
  EXPECT_EQ(llama2_like(R"({"add_bos_token": false, "bos_token": "<s>"})")->encode("Hi"), (Ids{12}));
}

json added(int id, const std::string& content, bool lstrip, bool rstrip, bool single_word = false,
           bool normalized = false, bool special = true) {
  return {{"id", id}, {"content", content}, {"single_word", single_word}, {"lstrip", lstrip},
          {"rstrip", rstrip}, {"normalized", normalized}, {"special", special}};
}

TEST(SmallTokenizer, AddedTokensStripAndSingleWord) {
  const json m = bpe({"a", "b", " ", "x", "<mask>"}, json::array());
  auto with = [&](const json& tok) { return make(m, {{"added_tokens", json::array({tok})}}); };
  EXPECT_EQ(with(added(4, "<mask>", false, false))->encode("a <mask> b"), (Ids{0, 2, 4, 2, 1}));
  EXPECT_EQ(with(added(4, "<mask>", true, false))->encode("a <mask> b"), (Ids{0, 4, 2, 1}));
  EXPECT_EQ(with(added(4, "<mask>", false, true))->encode("a <mask> b"), (Ids{0, 2, 4, 1}));
  EXPECT_EQ(with(added(4, "<mask>", true, true))->encode("a  <mask>  b"), (Ids{0, 4, 1}));
  // single_word: only where no word character touches the match.
  auto sw = with(added(5, "ab", false, false, true));
  EXPECT_EQ(sw->encode("ab a"), (Ids{5, 2, 0}));
  EXPECT_EQ(sw->encode("xab"), (Ids{3, 0, 1}));
  EXPECT_EQ(sw->encode("abx"), (Ids{0, 1, 3}));
  // Longest match wins; matching starts leftmost.
  auto two = make(m, {{"added_tokens", {added(5, "<m", false, false), added(4, "<mask>", false, false)}}});
  EXPECT_EQ(two->encode("<mask><ma"), (Ids{4, 5, 0}));
}

TEST(SmallTokenizer, NormalizedAddedTokensMatchAfterNormalization) {
  const json m = bpe({"h", "e", "l", "o", "H", "E", "L", "O"}, json::array());
  const json lower = {{"type", "Lowercase"}};
  auto norm = make(m, {{"normalizer", lower}, {"added_tokens", {added(8, "hello", false, false, false, true, false)}}});
  EXPECT_EQ(norm->encode("HELLO"), (Ids{8}));
  EXPECT_FALSE(norm->is_special(8));
  auto raw = make(m, {{"normalizer", lower}, {"added_tokens", {added(8, "HELLO", false, false, false, false, true)}}});
  EXPECT_EQ(raw->encode("HELLO"), (Ids{8}));
  EXPECT_EQ(raw->encode("hello"), (Ids{0, 1, 2, 2, 3}));
  EXPECT_EQ(raw->encode("HeLLO"), (Ids{0, 1, 2, 2, 3}));
}

TEST(SmallTokenizer, ByteLevelRoundTripsAnyText) {
  // A vocabulary of the 256 byte characters only: every byte is its own token.
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(byte_level::char_of(static_cast<uint8_t>(b)));
  auto t = make(bpe(v, json::array()),
                {{"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                 {"decoder", {{"type", "ByteLevel"}}}});
  const std::string text = "Hi \xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80 \x01\n\t x";
  const Ids ids = t->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[i], static_cast<uint8_t>(text[i]));
  EXPECT_EQ(t->decode(ids), text);
  EXPECT_EQ(t->id_to_token(' '), "\xC4\xA0");  // U+0120
  EXPECT_EQ(t->id_to_token('\n'), "\xC4\x8A");  // U+010A
}

TEST(SmallTokenizer, InvalidUtf8InputIsReplaced) {
  auto t = make(bpe({"a", "\xEF\xBF\xBD"}, json::array()));
  EXPECT_EQ(t->encode("a\xFF" "a"), (Ids{0, 1, 0}));
  EXPECT_EQ(t->encode("a\xE4\xB8"), (Ids{0, 1}));
}

TEST(SmallTokenizer, LoadErrorsNameFileAndType) {
  auto error = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const LoadError& e) {
      return e.what();
    }
    return "(none)";
  };
  EXPECT_EQ(error([] { make({{"type", "WordPiece"}, {"vocab", json::object()}}); }),
            "tokenizer.json: model type 'WordPiece' is not supported (supported: BPE)");
  EXPECT_NE(error([] { make(bpe({"a"}, {"a b"})); }).find("merge part 'b' is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(error([] { make(bpe({"a", "b"}, {"a b"})); }).find("merge result 'ab' is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(error([] {
              json m = bpe({"a"}, json::array());
              m["dropout"] = 0.1;
              make(m);
            }).find("dropout"),
            std::string::npos);

  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "vlm_tokenizer_errors";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                                              "normalizer": {"type": "BertNormalizer"}})";
  EXPECT_EQ(error([&] { Tokenizer::load(dir.string()); }).find((dir / "tokenizer.json").string() +
                                                                   ": normalizer type 'BertNormalizer' is not supported"),
            0u);
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})";
  std::ofstream(dir / "tokenizer_config.json") << "{ not json";
  EXPECT_EQ(error([&] { Tokenizer::load(dir.string()); }).find((dir / "tokenizer_config.json").string() + ": invalid JSON"),
            0u);
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_bos_token": true, "bos_token": "<s>"})";
  EXPECT_NE(error([&] { Tokenizer::load(dir.string()); }).find("token '<s>' for add_bos_token is not in the vocabulary"),
            std::string::npos);
}

std::string stream(const Tokenizer& t, const Ids& ids, bool skip, const Ids& prompt, std::vector<std::string>* chunks) {
  IncrementalDetokenizer d(t, skip, prompt);
  std::string all;
  for (int32_t id : ids) {
    chunks->push_back(d.push(id));
    all += chunks->back();
  }
  chunks->push_back(d.flush());
  return all + chunks->back();
}

TEST(IncrementalDetokenizer, LeadingSpaceOnlyAtTheStart) {
  auto t = llama2_like();
  std::vector<std::string> chunks;
  EXPECT_EQ(stream(*t, {12, 22}, false, {}, &chunks), "Hi there");
  EXPECT_EQ(chunks, (std::vector<std::string>{"Hi", " there", ""}));
  chunks.clear();
  EXPECT_EQ(stream(*t, {22}, false, {12}, &chunks), " there");  // after a prompt: keeps its space
  chunks.clear();
  EXPECT_EQ(stream(*t, {1, 12, 2, 22}, true, {}, &chunks), "Hi there");
  chunks.clear();
  EXPECT_EQ(stream(*t, {12, 2, 2, 22}, true, {}, &chunks), t->decode(Ids{12, 2, 2, 22}, true));
  chunks.clear();
  EXPECT_EQ(stream(*t, {22}, true, {1}, &chunks), "there");  // the prompt shows nothing
}

TEST(IncrementalDetokenizer, ByteFallbackCharactersWaitForTheirLastByte) {
  auto t = llama2_like();
  std::vector<std::string> chunks;
  // "中" = <0xE4> <0xB8> <0xAD>
  EXPECT_EQ(stream(*t, {12, 5, 6, 7, 22}, false, {}, &chunks), "Hi\xE4\xB8\xAD there");
  EXPECT_EQ(chunks, (std::vector<std::string>{"Hi", "", "", "\xE4\xB8\xAD", " there", ""}));
  // An unfinished character at the end: flush gives what a whole decode gives.
  chunks.clear();
  EXPECT_EQ(stream(*t, {12, 5, 6}, false, {}, &chunks), t->decode(Ids{12, 5, 6}));
  EXPECT_EQ(chunks.back(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // A prompt that ends inside a character: the character comes out whole.
  chunks.clear();
  EXPECT_EQ(stream(*t, {7, 22}, false, {12, 5, 6}, &chunks), "\xE4\xB8\xAD there");
  // A byte run that turns invalid after a character of it was emitted (the documented exception):
  // the stream keeps the character and goes on.
  chunks.clear();
  EXPECT_EQ(stream(*t, {5, 6, 7, 5, 22, 12}, false, {}, &chunks), "\xE4\xB8\xAD\xEF\xBF\xBD there Hi");
  EXPECT_EQ(t->decode(Ids{5, 6, 7, 5, 22, 12}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD there Hi");
  // A broken sequence followed by text is emitted as soon as the text arrives.
  chunks.clear();
  EXPECT_EQ(stream(*t, {5, 22}, false, {}, &chunks), t->decode(Ids{5, 22}));
}

}  // namespace
}  // namespace vlm
