// Tests ("value is name(args)") with jinja2's semantics: `number` includes booleans,
// `integer` does not; `sequence` and `iterable` hold for strings and dicts.
#include <cmath>
#include <unordered_map>

#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/operators.h"
#include "model/chat/jinja/builtins/py_string.h"

namespace vlm::jinja {
namespace {

const Value& one_arg(CallArgs& args, const char* name) {
  if (args.positional.size() != 1 || !args.keyword.empty())
    render_error(std::string("test '") + name + "' takes one argument");
  return args.positional[0];
}

void no_args(CallArgs& args, const char* name) {
  if (!args.positional.empty() || !args.keyword.empty())
    render_error(std::string("test '") + name + "' takes no arguments");
}

#define SIMPLE_TEST(fn, name, expr)                        \
  bool fn(Evaluator&, const Value& v, CallArgs& args) {    \
    no_args(args, name);                                   \
    return (expr);                                         \
  }

SIMPLE_TEST(t_defined, "defined", !v.is_undefined())
SIMPLE_TEST(t_undefined, "undefined", v.is_undefined())
SIMPLE_TEST(t_none, "none", v.is_none())
SIMPLE_TEST(t_boolean, "boolean", v.is_bool())
SIMPLE_TEST(t_true, "true", v.is_bool() && v.as_bool())
SIMPLE_TEST(t_false, "false", v.is_bool() && !v.as_bool())
SIMPLE_TEST(t_integer, "integer", v.is_int())
SIMPLE_TEST(t_float, "float", v.is_float())
SIMPLE_TEST(t_number, "number", v.is_number())
SIMPLE_TEST(t_string, "string", v.is_string())
SIMPLE_TEST(t_mapping, "mapping", v.is_mapping())
SIMPLE_TEST(t_iterable, "iterable", v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined())
SIMPLE_TEST(t_sequence, "sequence", v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined())
SIMPLE_TEST(t_callable, "callable", v.is_callable())
SIMPLE_TEST(t_escaped, "escaped", false)
SIMPLE_TEST(t_lower, "lower", v.is_string() && py::is_lower(v.as_string()))
SIMPLE_TEST(t_upper, "upper", v.is_string() && py::is_upper(v.as_string()))
SIMPLE_TEST(t_filter, "filter", v.is_string() && find_filter(v.as_string()) != nullptr)
SIMPLE_TEST(t_test, "test", v.is_string() && find_test(v.as_string()) != nullptr)

bool parity(const Value& v, int want) {
  fail_if_undefined(v);
  if (!v.is_number()) render_error("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
  return equals(binary_op("%", v, Value(2)), Value(want));
}
bool t_odd(Evaluator&, const Value& v, CallArgs& args) { no_args(args, "odd"); return parity(v, 1); }
bool t_even(Evaluator&, const Value& v, CallArgs& args) { no_args(args, "even"); return parity(v, 0); }

bool t_divisibleby(Evaluator&, const Value& v, CallArgs& args) {
  return equals(binary_op("%", v, one_arg(args, "divisibleby")), Value(0));
}
bool t_eq(Evaluator&, const Value& v, CallArgs& args) { return equals(v, one_arg(args, "eq")); }
bool t_ne(Evaluator&, const Value& v, CallArgs& args) { return !equals(v, one_arg(args, "ne")); }
bool t_lt(Evaluator&, const Value& v, CallArgs& args) { return less_than(v, one_arg(args, "lt")); }
bool t_gt(Evaluator&, const Value& v, CallArgs& args) { return less_than(one_arg(args, "gt"), v); }
bool t_le(Evaluator&, const Value& v, CallArgs& args) {
  const Value& o = one_arg(args, "le");
  return less_than(v, o) || equals(v, o);
}
bool t_ge(Evaluator&, const Value& v, CallArgs& args) {
  const Value& o = one_arg(args, "ge");
  return less_than(o, v) || equals(v, o);
}
bool t_in(Evaluator&, const Value& v, CallArgs& args) { return contains(one_arg(args, "in"), v); }

// Python's "is": identity for shared objects, equality of the immutable scalars.
bool t_sameas(Evaluator&, const Value& v, CallArgs& args) {
  const Value& o = one_arg(args, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kList: return &v.as_list() == &o.as_list();
    case Value::Kind::kDict: return &v.as_dict() == &o.as_dict();
    case Value::Kind::kCallable: return &v.as_callable() == &o.as_callable();
    default: return equals(v, o);
  }
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean}, {"true", t_true}, {"false", t_false}, {"integer", t_integer},
      {"float", t_float}, {"number", t_number}, {"string", t_string}, {"mapping", t_mapping},
      {"iterable", t_iterable}, {"sequence", t_sequence}, {"callable", t_callable},
      {"escaped", t_escaped}, {"lower", t_lower}, {"upper", t_upper}, {"filter", t_filter},
      {"test", t_test}, {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby},
      {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
      {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
      {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge},
      {"in", t_in}, {"sameas", t_sameas},
  };
  return table;
}

}  // namespace

TestFn find_test(std::string_view name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

bool is_jinja_test(std::string_view name) { return find_test(name) != nullptr; }

}  // namespace vlm::jinja
