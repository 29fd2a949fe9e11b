#include "engine/structured/json_schema_compiler.h"

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <set>

#include "engine/structured/regex_compiler.h"

namespace vlm::structured {
namespace {

using json = nlohmann::ordered_json;

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema",
                                            "$id", "id", "$comment", "definitions", "$defs"};
const std::set<std::string> kValueKeywords = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "anyOf", "$ref", "minLength", "maxLength", "pattern", "format"};

// Exact regexes of the supported formats (the JSON string's content).
const std::map<std::string, std::string> kFormats = {
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"ipv4", "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"},
};

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root) {}

  Grammar compile() {
    const uint32_t r = schema_rule(root_, "");
    return b_.build(r);
  }

  uint32_t any_object() { return object_any(); }
  Grammar build(uint32_t r) { return b_.build(r); }

 private:
  [[noreturn]] static void refuse(const std::string& keyword, const std::string& at, const std::string& why) {
    throw SchemaError("JSON Schema keyword '" + keyword + "' at '" + (at.empty() ? "#" : "#" + at) + "': " + why);
  }

  static uint64_t count(const json& s, const char* key, const std::string& at) {
    const json& v = s.at(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      refuse(key, at, "must be a non-negative integer");
    return v.get<uint64_t>();
  }

  // ---- shared rules ------------------------------------------------------------------------
  uint32_t lazy(uint32_t& slot, const char* name, const std::function<void(uint32_t)>& define) {
    if (slot == kNone) {
      slot = b_.declare(name);
      define(slot);
    }
    return slot;
  }
  uint32_t char_rule() {
    return lazy(char_, "char", [&](uint32_t r) {
      b_.add_alternative(r, {Symbol::ref(compile_regex(b_, "[^\"\\\\\\x00-\\x1f]"))});
      b_.add_alternative(r, {Symbol::ref(compile_regex(b_, "\\\\([\"\\\\/bfnrt]|u[0-9a-fA-F]{4})"))});
    });
  }
  uint32_t string_any() {
    return lazy(string_, "string", [&](uint32_t r) {
      SymbolSeq s = GrammarBuilder::literal("\"");
      s.push_back(Symbol::ref(b_.repeat({Symbol::ref(char_rule())}, 0, -1, "chars")));
      s.push_back(Symbol::set(ByteSet::of('"')));
      b_.add_alternative(r, s);
    });
  }
  uint32_t integer_any() {
    return lazy(integer_, "integer", [&](uint32_t r) { b_.add_alternative(r, {Symbol::ref(compile_regex(b_, "-?(0|[1-9][0-9]{0,15})"))}); });
  }
  uint32_t number_any() {
    return lazy(number_, "number", [&](uint32_t r) {
      b_.add_alternative(r, {Symbol::ref(compile_regex(b_, "-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,15})?([eE][-+]?[0-9]{1,2})?"))});
    });
  }
  uint32_t boolean_any() {
    return lazy(boolean_, "boolean", [&](uint32_t r) { for (const char* v : {"true", "false"}) b_.add_alternative(r, GrammarBuilder::literal(v)); });
  }
  uint32_t null_rule() {
    return lazy(null_, "null", [&](uint32_t r) { b_.add_alternative(r, GrammarBuilder::literal("null")); });
  }
  uint32_t value_any() {
    return lazy(value_, "value", [&](uint32_t r) {
      for (uint32_t s : {object_any(), array_any(), string_any(), number_any(), boolean_any(), null_rule()})
        b_.add_alternative(r, {Symbol::ref(s)});
    });
  }
  uint32_t object_any() {
    return lazy(object_, "object", [&](uint32_t r) {
      SymbolSeq kv{Symbol::ref(string_any()), Symbol::set(ByteSet::of(':')), Symbol::ref(value_any())};
      b_.add_alternative(r, list("{", kv, 0, -1, "}"));
    });
  }
  uint32_t array_any() {
    return lazy(array_, "array", [&](uint32_t r) { b_.add_alternative(r, list("[", {Symbol::ref(value_any())}, 0, -1, "]")); });
  }

  // open (item ("," item){min-1,max-1})? close, for min..max items.
  SymbolSeq list(const char* open, const SymbolSeq& item, int64_t min, int64_t max, const char* close) {
    SymbolSeq s = GrammarBuilder::literal(open);
    if (max != 0) {
      SymbolSeq more = GrammarBuilder::literal(",");
      more.insert(more.end(), item.begin(), item.end());
      SymbolSeq some = item;
      some.push_back(Symbol::ref(b_.repeat(more, std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1, "items")));
      const uint32_t body = b_.declare("list");
      b_.add_alternative(body, some);
      if (min == 0) b_.add_alternative(body, {});
      s.push_back(Symbol::ref(body));
    }
    SymbolSeq c = GrammarBuilder::literal(close);
    s.insert(s.end(), c.begin(), c.end());
    return s;
  }

  // ---- schemas -----------------------------------------------------------------------------
  uint32_t schema_rule(const json& s, const std::string& at) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw SchemaError("the schema at '#" + at + "' is false: no value satisfies it");
      return value_any();
    }
    if (!s.is_object()) throw SchemaError("the schema at '#" + at + "' must be an object or a boolean");
    for (const auto& [k, v] : s.items())
      if (!kAnnotations.count(k) && !kValueKeywords.count(k)) refuse(k, at, "not supported");
    if (s.contains("$ref")) return ref_rule(s, at);
    if (s.contains("anyOf")) return any_of(s, at);
    if (s.contains("enum") || s.contains("const")) return enumeration(s, at);
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty())
        for (const auto& x : t) {
          if (!x.is_string()) refuse("type", at, "must be a string or a list of strings");
          types.push_back(x.get<std::string>());
        }
      else refuse("type", at, "must be a string or a non-empty list of strings");
    } else {
      // No type: the keywords present say which kind to write (any other kind would pass too).
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) types.push_back("object");
      else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) types.push_back("array");
      else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") || s.contains("format")) types.push_back("string");
      else return value_any();
    }
    const uint32_t r = b_.declare("schema" + at);
    for (const std::string& t : types) b_.add_alternative(r, {Symbol::ref(typed(s, t, at))});
    return r;
  }

  uint32_t typed(const json& s, const std::string& t, const std::string& at) {
    if (t != "string" && s.contains("format")) refuse("format", at, "formats are supported on strings only");
    if (t == "object") return object(s, at);
    if (t == "array") return array(s, at);
    if (t == "string") return string(s, at);
    if (t == "integer") return integer_any();
    if (t == "number") return number_any();
    if (t == "boolean") return boolean_any();
    if (t == "null") return null_rule();
    refuse("type", at, "unknown type '" + t + "'");
  }

  uint32_t ref_rule(const json& s, const std::string& at) {
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && kValueKeywords.count(k)) refuse(k, at, "keywords beside $ref are not supported");
    if (!s["$ref"].is_string()) refuse("$ref", at, "must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (ref.empty() || ref[0] != '#') refuse("$ref", at, "only references within the schema (\"#...\") are supported, got '" + ref + "'");
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    const std::string pointer = ref.substr(1);
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(pointer));
    } catch (const json::exception&) {
      refuse("$ref", at, "'" + ref + "' does not resolve within the schema");
    }
    // Declared before compiling the target, so a recursive reference finds it.
    const uint32_t r = b_.declare("ref" + pointer);
    refs_[ref] = r;
    b_.add_alternative(r, {Symbol::ref(schema_rule(*target, pointer))});
    return r;
  }

  uint32_t any_of(const json& s, const std::string& at) {
    const json& branches = s["anyOf"];
    if (!branches.is_array() || branches.empty()) refuse("anyOf", at, "must be a non-empty list of schemas");
    const uint32_t r = b_.declare("anyOf" + at);
    for (size_t i = 0; i < branches.size(); ++i) {
      const std::string bat = at + "/anyOf/" + std::to_string(i);
      json merged = branches[i];
      if (merged.is_boolean() && !merged.get<bool>()) continue;  // a false branch admits nothing
      if (merged.is_boolean()) merged = json::object();
      if (!merged.is_object()) refuse("anyOf", bat, "must hold schemas");
      for (const auto& [k, v] : s.items()) {
        if (k == "anyOf" || kAnnotations.count(k)) continue;
        if (merged.contains(k)) refuse(k, bat, "the keyword is both beside anyOf and in a branch");
        merged[k] = v;
      }
      branch_schemas_.push_back(std::move(merged));  // kept alive: nothing refers into it later
      b_.add_alternative(r, {Symbol::ref(schema_rule(branch_schemas_.back(), bat))});
    }
    if (!b_.has_alternatives(r)) throw SchemaError("every anyOf branch at '#" + at + "' is false");
    return r;
  }

  // True when value v has JSON type t (integers are numbers too).
  static bool has_type(const json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
  }

  uint32_t enumeration(const json& s, const std::string& at) {
    for (const auto& [k, v] : s.items())
      if (kValueKeywords.count(k) && k != "enum" && k != "const" && k != "type")
        refuse(k, at, "keywords beside enum / const other than type are not supported");
    std::vector<json> values;
    if (s.contains("enum") && (!s["enum"].is_array() || s["enum"].empty())) refuse("enum", at, "must be a non-empty list");
    if (s.contains("const")) {
      if (!s.contains("enum") || std::find(s["enum"].begin(), s["enum"].end(), s["const"]) != s["enum"].end())
        values.push_back(s["const"]);
    } else {
      values.assign(s["enum"].begin(), s["enum"].end());
    }
    std::vector<std::string> texts;
    for (const auto& v : values) {
      bool ok = !s.contains("type");
      if (!ok) {
        const json& t = s["type"];
        for (const auto& x : t.is_array() ? t : json::array({t})) ok = ok || (x.is_string() && has_type(v, x.get<std::string>()));
      }
      if (ok) texts.push_back(v.dump(-1, ' ', false, json::error_handler_t::strict));
    }
    if (texts.empty()) throw SchemaError("no value of enum / const at '#" + at + "' satisfies the schema");
    return b_.choice(texts, "enum" + at);
  }

  uint32_t string(const json& s, const std::string& at) {
    if (s.contains("format")) {
      if (!s["format"].is_string() || !kFormats.count(s["format"].get<std::string>()))
        refuse("format", at, "supported formats: uuid, ipv4");
      if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength"))
        refuse("format", at, "format with pattern, minLength or maxLength is not supported");
      return quoted(compile_regex(b_, kFormats.at(s["format"].get<std::string>())));
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) refuse("pattern", at, "must be a string");
      if (s.contains("minLength") || s.contains("maxLength"))
        refuse("pattern", at, "pattern with minLength or maxLength is not supported");
      try {
        return quoted(compile_regex(b_, search_pattern_as_match(s["pattern"].get<std::string>()), {.json_string_safe = true}));
      } catch (const std::invalid_argument& e) {
        refuse("pattern", at, e.what());
      }
    }
    if (!s.contains("minLength") && !s.contains("maxLength")) return string_any();
    const int64_t lo = s.contains("minLength") ? static_cast<int64_t>(count(s, "minLength", at)) : 0;
    const int64_t hi = s.contains("maxLength") ? static_cast<int64_t>(count(s, "maxLength", at)) : -1;
    if (lo > 10000 || hi > 10000) refuse(lo > 10000 ? "minLength" : "maxLength", at, "at most 10000 is supported");
    if (hi >= 0 && hi < lo) throw SchemaError("maxLength < minLength at '#" + at + "': no value satisfies it");
    return quoted(b_.repeat({Symbol::ref(char_rule())}, lo, hi, "chars"));
  }

  uint32_t quoted(uint32_t content) {
    SymbolSeq s = GrammarBuilder::literal("\"");
    s.push_back(Symbol::ref(content));
    s.push_back(Symbol::set(ByteSet::of('"')));
    return b_.rule_of("string", {s});
  }

  uint32_t array(const json& s, const std::string& at) {
    SymbolSeq item{Symbol::ref(value_any())};
    if (s.contains("items")) {
      if (s["items"].is_array()) refuse("items", at, "a list of item schemas (tuples) is not supported");
      item = {Symbol::ref(schema_rule(s["items"], at + "/items"))};
    }
    const int64_t lo = s.contains("minItems") ? static_cast<int64_t>(count(s, "minItems", at)) : 0;
    const int64_t hi = s.contains("maxItems") ? static_cast<int64_t>(count(s, "maxItems", at)) : -1;
    if (lo > 1000 || hi > 1000) refuse(lo > 1000 ? "minItems" : "maxItems", at, "at most 1000 is supported");
    if (hi >= 0 && hi < lo) throw SchemaError("maxItems < minItems at '#" + at + "': no value satisfies it");
    return b_.rule_of("array" + at, {list("[", item, lo, hi, "]")});
  }

  uint32_t object(const json& s, const std::string& at) {
    struct Prop {
      std::string name;
      uint32_t value;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse("required", at, "must be a list of strings");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) refuse("required", at, "must be a list of strings");
        required.insert(r.get<std::string>());
      }
    }
    const json additional = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
    if (!additional.is_boolean() && !additional.is_object()) refuse("additionalProperties", at, "must be a boolean or a schema");
    const bool no_properties = !s.contains("properties") || (s["properties"].is_object() && s["properties"].empty());
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) refuse("properties", at, "must be an object");
      for (const auto& [name, sub] : s["properties"].items())
        props.push_back({name, schema_rule(sub, at + "/properties/" + name), required.count(name) > 0});
    }
    for (const std::string& name : required) {
      if (s.contains("properties") && s["properties"].contains(name)) continue;
      if (additional.is_boolean() && !additional.get<bool>())
        throw SchemaError("'" + name + "' is required but additionalProperties is false at '#" + at + "'");
      props.push_back({name, additional.is_object() ? schema_rule(additional, at + "/additionalProperties") : value_any(), true});
    }
    // An object schema that names no properties and allows others: any object (values of the
    // additionalProperties schema when it has one).
    if (no_properties && required.empty()) {
      if (additional.is_boolean() && !additional.get<bool>()) return b_.rule_of("object" + at, {GrammarBuilder::literal("{}")});
      if (additional.is_boolean()) return object_any();
      SymbolSeq kv{Symbol::ref(string_any()), Symbol::set(ByteSet::of(':')),
                   Symbol::ref(schema_rule(additional, at + "/additionalProperties"))};
      return b_.rule_of("object" + at, {list("{", kv, 0, -1, "}")});
    }
    // rest[i][first]: properties i.. with (first) or without a leading comma.
    const size_t n = props.size();
    std::vector<std::array<uint32_t, 2>> rest(n + 1);
    rest[n] = {b_.rule_of("end", std::vector<SymbolSeq>(1)), 0};
    rest[n][1] = rest[n][0];
    for (size_t i = n; i-- > 0;) {
      for (int first = 0; first < 2; ++first) {
        const uint32_t r = b_.declare("props" + at);
        SymbolSeq with = GrammarBuilder::literal(std::string(first ? "" : ",") + json(props[i].name).dump() + ":");
        with.push_back(Symbol::ref(props[i].value));
        with.push_back(Symbol::ref(rest[i + 1][0]));
        b_.add_alternative(r, with);
        if (!props[i].required) b_.add_alternative(r, {Symbol::ref(rest[i + 1][first])});
        rest[i][first] = r;
      }
    }
    SymbolSeq body = GrammarBuilder::literal("{");
    body.push_back(Symbol::ref(rest[0][1]));
    body.push_back(Symbol::set(ByteSet::of('}')));
    return b_.rule_of("object" + at, {body});
  }

  static constexpr uint32_t kNone = UINT32_MAX;
  const json& root_;
  GrammarBuilder b_;
  std::map<std::string, uint32_t> refs_;
  std::deque<json> branch_schemas_;
  uint32_t char_ = kNone, string_ = kNone, integer_ = kNone, number_ = kNone, boolean_ = kNone, null_ = kNone,
           value_ = kNone, object_ = kNone, array_ = kNone;
};

}  // namespace

const std::vector<std::string>& supported_schema_keywords() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> v(kValueKeywords.begin(), kValueKeywords.end());
    v.insert(v.end(), kAnnotations.begin(), kAnnotations.end());
    return v;
  }();
  return all;
}

Grammar compile_json_schema(const nlohmann::ordered_json& schema) {
  try {
    return SchemaCompiler(schema).compile();
  } catch (const SchemaError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw SchemaError(e.what());
  }
}

Grammar json_object_grammar() {
  const json empty = json::object();
  SchemaCompiler c(empty);
  return c.build(c.any_object());
}

}  // namespace vlm::structured
