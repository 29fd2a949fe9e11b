// Python operators and jinja2's attribute / item lookup on template values. Failures throw
// render errors without a position (the evaluator adds it).
#pragma once

#include <optional>
#include <string_view>

#include "model/chat/jinja/value.h"

namespace vlm::jinja {

// + - * / // % ** and ~ (string concatenation). Arithmetic on an undefined value fails with
// its hint, like jinja2's Undefined.
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value negate(const Value& v);  // unary minus
Value unary_plus(const Value& v);

// obj.name: the attribute (a method of str/list/dict) first, then the item obj['name'].
Value get_attr(const Value& obj, std::string_view name);
// obj[key]: the item first (dict key, list / str index), then a string key as attribute.
// Missing: undefined (with the jinja2 hint). An undefined obj fails.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a list, tuple or str; absent bounds are undefined or none.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// item in container (substring, list member, dict key).
bool contains(const Value& container, const Value& item);

// Python's "fmt % args" for %s %r %d %i %f %x and %%: used by the % operator on strings and
// the format filter.
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace vlm::jinja
