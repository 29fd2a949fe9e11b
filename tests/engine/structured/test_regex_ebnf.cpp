// Regex and EBNF compilation: the language matched is the pattern's, byte for byte (UTF-8
// classes included), and what is outside the subset is refused by name.
#include <gtest/gtest.h>

#include <regex>

#include "engine/structured/ebnf_compiler.h"
#include "engine/structured/regex_compiler.h"
#include "tests/engine/structured/structured_test_util.h"

namespace vlm::testing {
namespace {

using namespace structured;

Grammar regex_grammar(const std::string& p) {
  GrammarBuilder b;
  const uint32_t r = compile_regex(b, p);
  return b.build(r);
}

TEST(Regex, MatchesLikeStdRegexOnAsciiCases) {
  const std::vector<std::string> patterns = {"abc", "a|bc|", "[a-c]+x?", "(ab|cd){2,3}", "\\d{3}-\\d{2,}", "[^a-z]*",
                                             "(?:a|b)*c", "x{0}y", "\\w+@\\w+\\.com", "[\\]a-]+", "a.c", "(\\s|,)+"};
  const std::vector<std::string> inputs = {"", "abc", "a", "bc", "aabx", "abab", "ababab", "abababab", "cdab",
                                           "123-45", "123-4", "ABC", "abc1", "ac", "bbac", "y", "xy", "ab@cd.com",
                                           "]a-", "a\nc", "a c", " ,", "-", "a]"};
  for (const auto& p : patterns) {
    const Grammar g = regex_grammar(p);
    const std::regex re(p, std::regex::ECMAScript);
    for (const auto& in : inputs) EXPECT_EQ(grammar_matches(g, in), std::regex_match(in, re)) << p << " on '" << in << "'";
  }
}

TEST(Regex, Utf8ClassesMatchWholeCharacters) {
  const Grammar g = regex_grammar("[α-ω]{2}\\.[^a]");
  EXPECT_TRUE(grammar_matches(g, "αβ.b"));
  EXPECT_TRUE(grammar_matches(g, "ωω.€"));
  EXPECT_TRUE(grammar_matches(g, "ωω.\xF0\x9F\x98\x80"));  // a 4-byte character
  EXPECT_FALSE(grammar_matches(g, "αβ.a"));
  EXPECT_FALSE(grammar_matches(g, "ab.b"));
  EXPECT_FALSE(grammar_matches(g, "αβ.\xE2\x82"));  // a cut character
  const Grammar dot = regex_grammar(".");
  EXPECT_TRUE(grammar_matches(dot, "\xEF\xBF\xBF"));
  EXPECT_FALSE(grammar_matches(dot, "\xED\xA0\x80"));  // a surrogate is no character
  EXPECT_FALSE(grammar_matches(dot, "\n"));
}

TEST(Regex, AnchorsAtTheEndsAndJsonSafety) {
  EXPECT_TRUE(grammar_matches(regex_grammar("^ab$"), "ab"));
  GrammarBuilder b;
  const uint32_t r = compile_regex(b, ".+", {.json_string_safe = true});
  const Grammar g = b.build(r);
  EXPECT_TRUE(grammar_matches(g, "a'b"));
  EXPECT_FALSE(grammar_matches(g, "a\"b"));
  EXPECT_FALSE(grammar_matches(g, "a\\b"));
  EXPECT_FALSE(grammar_matches(g, "a\tb"));
  EXPECT_EQ(search_pattern_as_match("^a"), "(?:a).*");
  EXPECT_EQ(search_pattern_as_match("b$"), ".*(?:b)");
  EXPECT_EQ(search_pattern_as_match("^c$"), "(?:c)");
}

TEST(Regex, RefusesWhatItCannotMatchExactly) {
  for (const std::string p : {"(a)\\1", "(?=a)", "(?!a)", "a\\b", "a++", "(?i)a", "a^b", "(a", "a)", "[a", "*a",
                              "\\p{L}"}) {
    GrammarBuilder b;
    EXPECT_THROW(compile_regex(b, p), std::invalid_argument) << p;
  }
}

TEST(Ebnf, CompilesGbnfAndMatches) {
  const Grammar g = compile_ebnf(R"(
    # a list of pairs
    root ::= "{" pair ("," pair)* "}"
    pair ::= key ":" num
    key  ::= [a-z]+
    num  ::= "-"? [0-9]{1,3}
  )");
  EXPECT_TRUE(grammar_matches(g, "{a:1}"));
  EXPECT_TRUE(grammar_matches(g, "{ab:-12,c:999}"));
  EXPECT_FALSE(grammar_matches(g, "{ab:1234}"));
  EXPECT_FALSE(grammar_matches(g, "{}"));
  EXPECT_FALSE(grammar_matches(g, "{A:1}"));
  const Grammar esc = compile_ebnf("root ::= \"\\n\\\"\\u00e9\" | .");
  EXPECT_TRUE(grammar_matches(esc, "\n\"é"));
  EXPECT_TRUE(grammar_matches(esc, "é"));
}

TEST(Ebnf, RefusesBadGrammars) {
  EXPECT_THROW(compile_ebnf("root ::= a"), std::invalid_argument);             // undefined
  EXPECT_THROW(compile_ebnf("start ::= \"a\""), std::invalid_argument);        // no root
  EXPECT_THROW(compile_ebnf("root ::= root \"a\" | \"b\""), std::invalid_argument);  // left recursion
  EXPECT_THROW(compile_ebnf("root ::= x? root"), std::invalid_argument);      // left recursion through a nullable
  EXPECT_THROW(compile_ebnf("root ::= \"a"), std::invalid_argument);
  EXPECT_THROW(compile_ebnf("root ::= \"a\"\nroot ::= \"b\""), std::invalid_argument);
}

}  // namespace
}  // namespace vlm::testing
