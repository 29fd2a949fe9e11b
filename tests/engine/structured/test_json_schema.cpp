// JSON Schema compilation: random members of each schema's grammar are JSON values the schema
// accepts (checked here by hand for each keyword), members the schema rejects do not match,
// and unsupported keywords are refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/structured/json_schema_compiler.h"
#include "tests/engine/structured/structured_test_util.h"

namespace vlm::testing {
namespace {

using namespace structured;
using json = nlohmann::ordered_json;

std::vector<json> members(const json& schema, int count) {
  GrammarMatcher m(compile_json_schema(schema), byte_vocabulary());
  std::mt19937 rng(7);
  std::vector<json> out;
  for (int i = 0; i < count; ++i) {
    bool ok = false;
    const std::string s = random_member(m, rng, 0.3, 40, ok);
    EXPECT_TRUE(ok) << "stuck after '" << s << "'";
    out.push_back(json::parse(s));  // throws (fails the test) on invalid JSON
  }
  return out;
}

TEST(JsonSchema, ObjectWithRequiredAndOptionalProperties) {
  const json schema = json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","minLength":1,"maxLength":4},
      "age":{"type":"integer"},
      "tags":{"type":"array","items":{"enum":["a","b",3]},"minItems":1,"maxItems":2},
      "kind":{"const":"x"}},
    "required":["name","tags"]})");
  for (const json& v : members(schema, 40)) {
    ASSERT_TRUE(v.is_object());
    ASSERT_TRUE(v.contains("name") && v["name"].is_string());
    const std::string name = v["name"];
    EXPECT_GE(name.size(), 1u);
    ASSERT_TRUE(v.contains("tags") && v["tags"].is_array());
    EXPECT_GE(v["tags"].size(), 1u);
    EXPECT_LE(v["tags"].size(), 2u);
    for (const json& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "b" || t == 3) << t;
    if (v.contains("age")) EXPECT_TRUE(v["age"].is_number_integer());
    if (v.contains("kind")) EXPECT_EQ(v["kind"], "x");
    for (const auto& [k, x] : v.items()) EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "kind") << k;
  }
  const Grammar g = compile_json_schema(schema);
  EXPECT_TRUE(grammar_matches(g, R"({"name":"ab","tags":["a"]})"));
  EXPECT_TRUE(grammar_matches(g, R"({"name":"ab","age":-3,"tags":[3,"b"],"kind":"x"})"));
  EXPECT_FALSE(grammar_matches(g, R"({"name":"","tags":["a"]})"));      // minLength
  EXPECT_FALSE(grammar_matches(g, R"({"name":"abcde","tags":["a"]})"));  // maxLength
  EXPECT_FALSE(grammar_matches(g, R"({"name":"ab"})"));                  // required
  EXPECT_FALSE(grammar_matches(g, R"({"name":"ab","tags":[]})"));        // minItems
  EXPECT_FALSE(grammar_matches(g, R"({"name":"ab","tags":["a","a","a"]})"));  // maxItems
  EXPECT_FALSE(grammar_matches(g, R"({"name":"ab","tags":["c"]})"));     // enum
  EXPECT_FALSE(grammar_matches(g, R"({"name":"ab","age":1.5,"tags":["a"]})"));  // integer
}

TEST(JsonSchema, RefsAnyOfTypeListsAndFormats) {
  const json schema = json::parse(R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":["integer","null"]},"next":{"$ref":"#/$defs/node"}},"required":["v"]}},
    "anyOf":[{"$ref":"#/$defs/node"},{"type":"string","format":"uuid"},{"type":"string","pattern":"^x[0-9]+$"}]})");
  int objects = 0;
  for (const json& v : members(schema, 60)) {
    if (v.is_object()) {
      ++objects;
      for (const json* n = &v; n; n = n->contains("next") ? &(*n)["next"] : nullptr)
        EXPECT_TRUE((*n)["v"].is_null() || (*n)["v"].is_number_integer());
    } else {
      ASSERT_TRUE(v.is_string());
      const std::string s = v;
      EXPECT_TRUE((s.size() == 36 && s[8] == '-') || (s[0] == 'x' && s.size() > 1)) << s;
    }
  }
  EXPECT_GT(objects, 0);
  const Grammar g = compile_json_schema(schema);
  EXPECT_TRUE(grammar_matches(g, R"({"v":1,"next":{"v":null}})"));
  EXPECT_TRUE(grammar_matches(g, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(grammar_matches(g, R"("123e4567-e89b-12d3-a456-42661417400")"));
  EXPECT_TRUE(grammar_matches(g, R"("x12")"));
  EXPECT_FALSE(grammar_matches(g, R"("y12")"));
  const Grammar ip = compile_json_schema(json::parse(R"({"type":"string","format":"ipv4"})"));
  EXPECT_TRUE(grammar_matches(ip, R"("255.0.10.199")"));
  EXPECT_FALSE(grammar_matches(ip, R"("256.0.0.1")"));
  EXPECT_FALSE(grammar_matches(ip, R"("01.0.0.1")"));
}

TEST(JsonSchema, UnanchoredPatternsAreSearches) {
  const Grammar g = compile_json_schema(json::parse(R"({"type":"string","pattern":"ab"})"));
  EXPECT_TRUE(grammar_matches(g, R"("xxabyy")"));
  EXPECT_FALSE(grammar_matches(g, R"("xxa")"));
}

TEST(JsonSchema, AnyValueAndJsonObject) {
  for (const json& v : members(json::object(), 30)) (void)v;  // parses
  GrammarMatcher m(json_object_grammar(), byte_vocabulary());
  std::mt19937 rng(3);
  for (int i = 0; i < 30; ++i) {
    bool ok = false;
    const std::string s = random_member(m, rng, 0.3, 40, ok);
    ASSERT_TRUE(ok);
    EXPECT_TRUE(json::parse(s).is_object()) << s;
  }
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"integer","minimum":3})", "'minimum'"},
      {R"({"type":"object","properties":{"a":{"oneOf":[{"type":"string"}]}}})", "'oneOf'"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"type":"string","format":"email"})", "'format'"},
      {R"({"$ref":"http://example.com/s.json"})", "'$ref'"},
      {R"({"type":"array","items":[{"type":"string"}]})", "'items'"},
      {R"({"not":{}})", "'not'"},
      {R"({"$ref":"#/definitions/missing"})", "'$ref'"},
  };
  for (const auto& [schema, keyword] : cases) {
    try {
      compile_json_schema(json::parse(schema));
      ADD_FAILURE() << schema << " compiled";
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find(keyword), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(compile_json_schema(json(false)), SchemaError);
  EXPECT_THROW(compile_json_schema(json::parse(R"({"enum":["a"],"type":"integer"})")), SchemaError);
}

}  // namespace
}  // namespace vlm::testing
