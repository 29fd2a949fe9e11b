// Filters on strings, numbers and JSON, with jinja2's semantics (its soft_str: an undefined
// value is the empty string) and Hugging Face's tojson (json.dumps, ensure_ascii=False).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "model/chat/jinja/builtins/builtin_filters_impl.h"
#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/evaluator.h"
#include "model/chat/jinja/operators.h"
#include "model/chat/jinja/builtins/py_string.h"


// GCC 12 reports a false -Wrestrict inside std::string's operator+ ("x" + str) at -O3
// (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"
namespace vlm::jinja {
namespace {

std::string str_arg(const ArgBinder& a, size_t i, const char* fn) {
  if (!a.get(i).is_string()) render_error(std::string(fn) + ": expected a string argument, got " + type_name(a.get(i)));
  return a.get(i).as_string();
}

Value f_trim(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("trim", args, {"chars"});
  std::optional<std::string> chars;
  if (a.has(0) && !a.get(0).is_none()) chars = str_arg(a, 0, "trim");
  return Value(py::strip(to_str(v), chars, true, true));
}

Value f_upper(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("upper", args, {});
  return Value(py::upper(to_str(v)));
}
Value f_lower(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("lower", args, {});
  return Value(py::lower(to_str(v)));
}
Value f_title(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("title", args, {});
  return Value(py::jinja_title(to_str(v)));
}
Value f_capitalize(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("capitalize", args, {});
  return Value(py::capitalize(to_str(v)));
}

Value f_replace(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"}, 2);
  int64_t count = -1;
  if (a.has(2) && !a.get(2).is_none()) {
    if (!a.get(2).is_integral()) render_error("replace: count must be an integer");
    count = a.get(2).as_int();
  }
  return Value(py::replace(to_str(v), to_str(a.get(0)), to_str(a.get(1)), count));
}

Value f_string(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("string", args, {});
  return Value(to_str(v));
}

Value f_safe(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("safe", args, {});
  return v.is_undefined() ? v : Value(to_str(v));
}

Value f_escape(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("escape", args, {});
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value(std::move(out));
}

Value f_indent(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  std::string unit = "    ";
  if (a.has(0)) {
    const Value& w = a.get(0);
    if (w.is_string()) unit = w.as_string();
    else if (w.is_integral()) unit = std::string(static_cast<size_t>(std::max<int64_t>(w.as_int(), 0)), ' ');
    else render_error("indent: width must be an integer or a string");
  }
  bool first = a.has(1) && truthy(a.get(1));
  bool blank = a.has(2) && truthy(a.get(2));
  std::vector<std::string> lines = py::splitlines(to_str(v) + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    bool pad = i == 0 ? first : (blank || !lines[i].empty());
    if (pad) out += unit;
    out += lines[i];
  }
  return Value(std::move(out));
}

Value f_center(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("center", args, {"width"});
  std::string s = to_str(v);
  int64_t width = a.has(0) && a.get(0).is_integral() ? a.get(0).as_int() : 80;
  int64_t len = py::num_code_points(s);
  if (width <= len) return Value(s);
  int64_t total = width - len;
  int64_t left = total / 2 + (total & width & 1);  // CPython's str.center
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

Value f_wordcount(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("wordcount", args, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : py::decode_utf8(to_str(v))) {
    std::string ch;
    py::append_utf8(ch, c);
    bool word = c == '_' || py::is_alnum(ch);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Value f_format(Evaluator&, const Value& v, CallArgs& args) {
  if (!args.keyword.empty()) render_error("format: keyword arguments are not supported");
  return Value(percent_format(to_str(v), Value::list(args.positional, true)));
}

// Python's int(str, base) and float(str) on template strings.
std::optional<int64_t> parse_int(std::string s, int base) {
  s = py::strip(s, std::nullopt, true, true);
  std::string digits;
  for (char c : s)
    if (c != '_') digits.push_back(c);
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno || *end) return std::nullopt;
  return v;
}

std::optional<double> parse_float(std::string s) {
  s = py::strip(s, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (*end) return std::nullopt;
  return v;
}

Value f_int(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("int", args, {"default", "base"});
  Value def = a.get_or(0, Value(0));
  int base = a.has(1) && a.get(1).is_integral() ? static_cast<int>(a.get(1).as_int()) : 10;
  if (v.is_integral()) return Value(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d)) return def;
    return Value(static_cast<int64_t>(std::trunc(d)));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value(*i);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d)) return Value(static_cast<int64_t>(std::trunc(*d)));
  }
  return def;
}

Value f_float(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("float", args, {"default"});
  Value def = a.get_or(0, Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value(*d);
  return def;
}

Value f_abs(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("abs", args, {});
  fail_if_undefined(v);
  if (v.is_integral()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  render_error("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("round", args, {"precision", "method"});
  int64_t precision = a.has(0) && a.get(0).is_integral() ? a.get(0).as_int() : 0;
  std::string method = a.has(1) ? to_str(a.get(1)) : "common";
  fail_if_undefined(v);
  if (!v.is_number()) render_error("type " + type_name(v) + " doesn't define __round__ method");
  if (method != "common" && method != "ceil" && method != "floor")
    render_error("method must be common, ceil or floor");
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method != "common") {
    double x = v.as_double() * scale;
    return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
  }
  if (v.is_integral()) {
    if (precision >= 0) return Value(v.as_int());
    return Value(static_cast<int64_t>(std::nearbyint(v.as_double() * scale) / scale));
  }
  double d = v.as_double();
  if (!std::isfinite(d)) return v;
  if (precision < 0) return Value(std::nearbyint(d * scale) / scale);
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), d);
  return Value(std::strtod(buf, nullptr));
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False).
Value f_tojson(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = a.has(0) && truthy(a.get(0));
  if (a.has(1) && !a.get(1).is_none()) {
    const Value& ind = a.get(1);
    if (ind.is_string()) o.indent = ind.as_string();
    else if (ind.is_integral()) o.indent = std::string(static_cast<size_t>(std::max<int64_t>(ind.as_int(), 0)), ' ');
    else render_error("tojson: indent must be an integer or a string");
    o.item_separator = ",";
  }
  if (a.has(2) && !a.get(2).is_none()) {
    std::vector<Value> seps = iterate(a.get(2));
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      render_error("tojson: separators must be a pair of strings");
    o.item_separator = seps[0].as_string();
    o.key_separator = seps[1].as_string();
  }
  o.sort_keys = a.has(3) && truthy(a.get(3));
  return Value(to_json(v, o));
}

Value f_default(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("default", args, {"default_value", "boolean"});
  bool boolean = a.has(1) && truthy(a.get(1));
  if (v.is_undefined() || (boolean && !truthy(v))) return a.get_or(0, Value(std::string()));
  return v;
}

Value f_length(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("length", args, {});
  return Value(length(v));
}

// jinja2's attr filter reads Python attributes only (a method, a namespace member), never items.
Value f_attr(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("attr", args, {"name"}, 1);
  std::string name = str_arg(a, 0, "attr");
  if (v.is_namespace()) {
    if (const Value* m = v.as_dict().find(name)) return *m;
  } else if (auto m = find_attribute(v, name)) {
    return *m;
  }
  return Value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
}

}  // namespace

void register_scalar_filters(FilterTable& t) {
  t["trim"] = f_trim;
  t["upper"] = f_upper;
  t["lower"] = f_lower;
  t["title"] = f_title;
  t["capitalize"] = f_capitalize;
  t["replace"] = f_replace;
  t["string"] = f_string;
  t["safe"] = f_safe;
  t["escape"] = f_escape;
  t["e"] = f_escape;
  t["forceescape"] = f_escape;
  t["indent"] = f_indent;
  t["center"] = f_center;
  t["wordcount"] = f_wordcount;
  t["format"] = f_format;
  t["int"] = f_int;
  t["float"] = f_float;
  t["abs"] = f_abs;
  t["round"] = f_round;
  t["tojson"] = f_tojson;
  t["default"] = f_default;
  t["d"] = f_default;
  t["length"] = f_length;
  t["count"] = f_length;
  t["attr"] = f_attr;
}

FilterFn find_filter(std::string_view name) {
  static const FilterTable table = [] {
    FilterTable t;
    register_scalar_filters(t);
    register_sequence_filters(t);
    return t;
  }();
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

bool is_jinja_filter(std::string_view name) {
  static const std::string_view kAll[] = {
      "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
      "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
      "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
      "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
      "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
      "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};
  for (std::string_view n : kAll)
    if (n == name) return true;
  return false;
}

}  // namespace vlm::jinja
