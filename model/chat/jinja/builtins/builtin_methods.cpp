// Methods of str, dict and list as templates call them (message.content.startswith(...),
// tool.items(), ...), with Python's semantics. Mutating methods are refused like jinja2's
// ImmutableSandboxedEnvironment (HF's renderer) refuses them.
#include <algorithm>
#include <cstdint>

#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/evaluator.h"
#include "model/chat/jinja/builtins/py_string.h"


// GCC 12 reports a false -Wrestrict inside std::string's operator+ ("x" + str) at -O3
// (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"
namespace vlm::jinja {
namespace {

using Method = Value (*)(const Value& self, CallArgs& args, const std::string& name);

std::optional<std::string> opt_str(const ArgBinder& a, size_t i, const std::string& fn) {
  if (!a.has(i) || a.get(i).is_none()) return std::nullopt;
  if (!a.get(i).is_string()) render_error(fn + " arg must be None or str");
  return a.get(i).as_string();
}

const std::string& need_str(const Value& v, const std::string& fn) {
  if (!v.is_string()) render_error(fn + "() argument must be str, not " + type_name(v));
  return v.as_string();
}

int64_t opt_int(const ArgBinder& a, size_t i, int64_t def) {
  if (!a.has(i) || a.get(i).is_none()) return def;
  if (!a.get(i).is_integral()) render_error("'" + type_name(a.get(i)) + "' object cannot be interpreted as an integer");
  return a.get(i).as_int();
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

// str.format with automatic or explicit field numbering, names, !r/!s; no format specs.
std::string str_format(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else render_error("Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) render_error("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      if (colon + 1 < field.size()) render_error("format specs in str.format are not supported");
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t idx = field.empty() ? auto_index++ : field.size() > 18 ? SIZE_MAX : std::stoul(field);
      if (idx >= args.positional.size()) render_error("Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      v = &args.positional[idx];
    } else {
      for (const auto& [k, kv] : args.keyword)
        if (k == field) v = &kv;
      if (!v) render_error("KeyError: '" + field + "'");
    }
    out += conversion == 'r' ? repr(*v) : to_str(*v);
  }
  return out;
}

Value str_method(const Value& self, CallArgs& args, const std::string& name) {
  const std::string& s = self.as_string();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgBinder a(name, args, {"chars"});
    return Value(py::strip(s, opt_str(a, 0, name), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    ArgBinder a(name, args, {"sep", "maxsplit"});
    auto sep = opt_str(a, 0, name);
    if (sep && sep->empty()) render_error("empty separator");
    return str_list(py::split(s, sep, opt_int(a, 1, -1), name == "rsplit"));
  }
  if (name == "splitlines") {
    ArgBinder a(name, args, {"keepends"});
    return str_list(py::splitlines(s, a.has(0) && truthy(a.get(0))));
  }
  if (name == "startswith" || name == "endswith") {
    ArgBinder a(name, args, {"prefix", "start", "end"}, 1);
    std::u32string u = py::decode_utf8(s);
    int64_t n = static_cast<int64_t>(u.size());
    auto bound = [&](size_t i, int64_t def) {
      int64_t x = opt_int(a, i, def);
      if (x < 0) x += n;
      return std::clamp<int64_t>(x, 0, n);
    };
    int64_t b = bound(1, 0), e = bound(2, n);
    std::string sub = b <= e ? py::encode_utf8(std::u32string_view(u).substr(b, e - b)) : std::string();
    std::vector<Value> options = a.get(0).is_list() && a.get(0).as_list().is_tuple
                                     ? a.get(0).as_list().items : std::vector<Value>{a.get(0)};
    for (const Value& o : options) {
      const std::string& p = need_str(o, name);
      bool hit = name == "startswith" ? sub.compare(0, p.size(), p) == 0 && sub.size() >= p.size()
                                      : sub.size() >= p.size() && sub.compare(sub.size() - p.size(), p.size(), p) == 0;
      if (hit && b <= e) return Value(true);
    }
    return Value(false);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower") {
    ArgBinder a(name, args, {});
    if (name == "upper") return Value(py::upper(s));
    if (name == "lower") return Value(py::lower(s));
    if (name == "title") return Value(py::title(s));
    if (name == "capitalize") return Value(py::capitalize(s));
    if (name == "isdigit") return Value(py::is_digit(s));
    if (name == "isalpha") return Value(py::is_alpha(s));
    if (name == "isalnum") return Value(py::is_alnum(s));
    if (name == "isspace") return Value(py::is_space_str(s));
    if (name == "isupper") return Value(py::is_upper(s));
    return Value(py::is_lower(s));
  }
  if (name == "replace") {
    ArgBinder a(name, args, {"old", "new", "count"}, 2);
    return Value(py::replace(s, need_str(a.get(0), name), need_str(a.get(1), name), opt_int(a, 2, -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ArgBinder a(name, args, {"sub"}, 1);
    const std::string& sub = need_str(a.get(0), name);
    if (name == "count") return Value(py::count(s, sub));
    int64_t i = py::find(s, sub, name[0] == 'r');
    if (i < 0 && (name == "index" || name == "rindex")) render_error("substring not found");
    return Value(i);
  }
  if (name == "join") {
    ArgBinder a(name, args, {"iterable"}, 1);
    std::string out;
    bool first = true;
    for (const Value& v : iterate(a.get(0))) {
      if (!v.is_string()) render_error("sequence item: expected str instance, " + type_name(v) + " found");
      if (!first) out += s;
      out += v.as_string();
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(str_format(s, args));
  if (name == "removeprefix" || name == "removesuffix") {
    ArgBinder a(name, args, {"affix"}, 1);
    const std::string& x = need_str(a.get(0), name);
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value(s.substr(0, s.size() - x.size()));
    return self;
  }
  render_error("unsupported str method '" + name + "'");
}

Value dict_method(const Value& self, CallArgs& args, const std::string& name) {
  const Dict& d = self.as_dict();
  if (name == "items" || name == "keys" || name == "values") {
    ArgBinder a(name, args, {});
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) {
      if (name == "items") out.push_back(Value::list({Value(k), v}, true));
      else out.push_back(name == "keys" ? Value(k) : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    ArgBinder a(name, args, {"key", "default"}, 1);
    if (a.get(0).is_string())
      if (const Value* v = d.find(a.get(0).as_string())) return *v;
    return a.get_or(1, Value::none());
  }
  if (name == "copy") {
    ArgBinder a(name, args, {});
    return Value::dict(d.items);
  }
  render_error("unsupported dict method '" + name + "'");
}

Value list_method(const Value& self, CallArgs& args, const std::string& name) {
  const auto& items = self.as_list().items;
  ArgBinder a(name, args, {"value"}, 1);
  int64_t hits = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], a.get(0))) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++hits;
  }
  if (name == "index") render_error(repr(a.get(0)) + " is not in list");
  return Value(hits);
}

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value bind(const Value& self, std::string_view name, Method m) {
  std::string n(name);
  return Value::function(n, [self, n, m](Evaluator&, CallArgs& args) { return m(self, args, n); });
}

Value unsafe(const Value& self, std::string_view name) {
  return Value::undefined("access to attribute '" + std::string(name) + "' of '" + type_name(self) +
                          "' object is unsafe");
}

}  // namespace

std::optional<Value> find_attribute(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kString:
      if (one_of(name, {"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith",
                        "endswith", "upper", "lower", "title", "capitalize", "replace", "find",
                        "rfind", "index", "rindex", "count", "join", "format", "isdigit", "isalpha",
                        "isalnum", "isspace", "isupper", "islower", "removeprefix", "removesuffix"}))
        return bind(object, name, str_method);
      return std::nullopt;
    case Value::Kind::kDict:
      if (object.as_dict().is_namespace) return std::nullopt;
      if (one_of(name, {"items", "keys", "values", "get", "copy"})) return bind(object, name, dict_method);
      if (one_of(name, {"pop", "popitem", "setdefault", "update", "clear"})) return unsafe(object, name);
      return std::nullopt;
    case Value::Kind::kList:
      if (one_of(name, {"index", "count"})) return bind(object, name, list_method);
      if (one_of(name, {"append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear"}))
        return unsafe(object, name);
      return std::nullopt;
    default: return std::nullopt;
  }
}

}  // namespace vlm::jinja
