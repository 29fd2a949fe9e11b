// The built-in filters, tests, global functions and methods of the Jinja subset (the set
// Hugging Face chat templates use, with jinja2's and Python's semantics).
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "model/chat/jinja/ast.h"
#include "model/chat/jinja/value.h"

namespace vlm::jinja {

struct Scope;

// nullptr when the name is not a supported filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// True for names jinja2 knows but this subset does not implement (for a clearer message).
bool is_jinja_filter(std::string_view name);
bool is_jinja_test(std::string_view name);

// The attribute `name` of a str, list, dict or namespace as Python's getattr() sees it through
// jinja2's immutable sandbox: a bound method (str.strip, dict.items, ...), a namespace member,
// or nullopt when there is none. Methods that mutate are refused like the sandbox refuses them.
std::optional<Value> find_attribute(const Value& object, std::string_view name);

// range, namespace, dict, raise_exception, strftime_now, cycler, joiner.
void add_globals(Scope& scope);

// Binds call arguments to parameter names like a Python signature: positional first, then
// keywords. Throws a render error for too many positional arguments, an unknown or repeated
// keyword, or a missing required parameter (the first num_required ones).
class ArgBinder {
 public:
  ArgBinder(std::string_view function, CallArgs& args, std::initializer_list<std::string_view> params,
            size_t num_required = 0);
  bool has(size_t i) const { return given_[i] != nullptr; }
  const Value& get(size_t i) const;  // precondition: has(i)
  Value get_or(size_t i, Value fallback) const { return has(i) ? get(i) : std::move(fallback); }

 private:
  std::vector<const Value*> given_;
};

}  // namespace vlm::jinja
