// The values a Jinja template computes with, with Python semantics: truthiness, equality,
// ordering, str() and repr(), and json.dumps(). Lists, dicts and callables are shared by
// reference like Python objects; the only mutation a template can make (HF renders in jinja2's
// ImmutableSandboxedEnvironment) is assigning an attribute of a namespace().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace vlm::jinja {

class Value;
class Evaluator;

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
};

// A dict keeps insertion order (Python 3.7+). Keys are strings: the JSON the server passes has
// no other keys, and templates rarely build dicts with other keys (a render error if they do).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // a jinja2 namespace(): attributes only, assignable with set

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces an existing key in place
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using Function = std::function<Value(Evaluator&, CallArgs&)>;

struct Callable {
  std::string name;  // for repr() and error messages
  Function fn;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict,
                              kCallable };

  Value() : v_(Undefined{}) {}  // undefined, with no hint
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}

  // An undefined value; hint is the error raised when the value is used where jinja2's
  // Undefined raises ("'foo' is undefined", "'dict object' has no attribute 'x'").
  static Value undefined(std::string hint) { Value v; v.v_ = Undefined{std::move(hint)}; return v; }
  static Value none() { return Value(nullptr); }
  static Value list(std::vector<Value> items = {}, bool is_tuple = false);
  static Value dict(std::vector<std::pair<std::string, Value>> items = {});
  static Value function(std::string name, Function fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_integral() const { return is_int() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }  // list or tuple
  bool is_dict() const { return kind() == Kind::kDict; }  // dict or namespace
  bool is_mapping() const { return is_dict() && !as_dict().is_namespace; }
  bool is_namespace() const { return is_dict() && as_dict().is_namespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  // Accessors; precondition: the matching kind (VLM_CHECK-free: std::get throws otherwise).
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;    // int or bool
  double as_double() const;  // int, bool or float
  const std::string& as_string() const { return std::get<std::string>(v_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }

 private:
  struct Undefined {
    std::string hint;
  };
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<List>, std::shared_ptr<Dict>, std::shared_ptr<Callable>>
      v_;
};

// Python type name ("str", "int", "dict", "NoneType", ...), for error messages.
std::string type_name(const Value& v);
// Throws the undefined value's error (jinja2's UndefinedError) when v is undefined.
void fail_if_undefined(const Value& v);

bool truthy(const Value& v);
std::string to_str(const Value& v);  // Python str(); undefined -> ""
std::string repr(const Value& v);    // Python repr()
bool equals(const Value& a, const Value& b);
// Python ordering (<): numbers, strings (by code point), lists and tuples; TypeError otherwise.
bool less_than(const Value& a, const Value& b);

// Python len() and iteration: a string yields its characters, a dict its keys; undefined is
// empty. Other kinds raise TypeError.
int64_t length(const Value& v);
std::vector<Value> iterate(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line; else the indent unit
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// Python json.dumps(v, ...). Undefined or callables raise TypeError (not JSON serializable).
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace vlm::jinja
