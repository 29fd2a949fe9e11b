#include "model/chat/jinja/value.h"

#include <algorithm>

#include "model/chat/jinja/error.h"
#include "model/chat/jinja/builtins/py_string.h"

namespace vlm::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(std::move(l));
}

Value Value::dict(std::vector<std::pair<std::string, Value>> items) {
  auto d = std::make_shared<Dict>();
  d->items = std::move(items);
  return Value(std::move(d));
}

Value Value::function(std::string name, Function fn) {
  return Value(std::make_shared<Callable>(Callable{std::move(name), std::move(fn)}));
}

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict: return v.as_dict().is_namespace ? "Namespace" : "dict";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

void fail_if_undefined(const Value& v) {
  if (!v.is_undefined()) return;
  render_error(v.undefined_hint().empty() ? "undefined value" : v.undefined_hint());
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_double() != 0.0;
    case Value::Kind::kString: return !v.as_string().empty();
    case Value::Kind::kList: return !v.as_list().items.empty();
    case Value::Kind::kDict: return v.as_dict().is_namespace || !v.as_dict().items.empty();
    case Value::Kind::kCallable: return true;
  }
  return false;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kString: return v.as_string();
    default: return repr(v);
  }
}

namespace {
constexpr int kMaxNesting = 256;  // repr / json.dumps of deeper (or cyclic) values fail
std::string repr_at(const Value& v, int depth);
}  // namespace

std::string repr(const Value& v) { return repr_at(v, 0); }

namespace {
std::string repr_at(const Value& v, int depth) {
  if (depth > kMaxNesting) render_error("value nested too deeply to print (a cycle?)");
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return py::float_repr(v.as_double());
    case Value::Kind::kString: return py::repr(v.as_string());
    case Value::Kind::kList: {
      const List& l = v.as_list();
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += repr_at(l.items[i], depth + 1);
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      out += l.is_tuple ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      const Dict& d = v.as_dict();
      std::string out = d.is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) out += ", ";
        out += py::repr(d.items[i].first) + ": " + repr_at(d.items[i].second, depth + 1);
      }
      out += d.is_namespace ? "}>" : "}";
      return out;
    }
    case Value::Kind::kCallable: return "<function " + v.as_callable().name + ">";
  }
  return "";
}
}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.is_namespace || y.is_namespace) return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !equals(v, *w)) return false;
      }
      return true;
    }
    case Value::Kind::kCallable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  fail_if_undefined(a);
  fail_if_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  render_error("'<' not supported between instances of '" + type_name(a) + "' and '" +
               type_name(b) + "'");
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return py::num_code_points(v.as_string());
    case Value::Kind::kList: return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      if (!v.as_dict().is_namespace) return static_cast<int64_t>(v.as_dict().items.size());
      break;
    default: break;
  }
  render_error("object of type '" + type_name(v) + "' has no len()");
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::kUndefined: return out;
    case Value::Kind::kString:
      for (char32_t c : py::decode_utf8(v.as_string())) {
        std::string s;
        py::append_utf8(s, c);
        out.emplace_back(std::move(s));
      }
      return out;
    case Value::Kind::kList: return v.as_list().items;
    case Value::Kind::kDict:
      if (v.as_dict().is_namespace) break;
      for (const auto& item : v.as_dict().items) out.emplace_back(item.first);
      return out;
    default: break;
  }
  render_error("'" + type_name(v) + "' object is not iterable");
}

namespace {

void dump(std::string& out, const Value& v, const JsonOptions& o, int level) {
  if (level > kMaxNesting) render_error("value nested too deeply for JSON (a cycle?)");
  auto newline = [&](int lvl) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (d != d) out += "NaN";
      else if (d == 1.0 / 0.0) out += "Infinity";
      else if (d == -1.0 / 0.0) out += "-Infinity";
      else out += py::float_repr(d);
      return;
    }
    case Value::Kind::kString: py::append_json_string(out, v.as_string(), o.ensure_ascii); return;
    case Value::Kind::kList: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(level + 1);
        dump(out, items[i], o, level + 1);
      }
      newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      const Dict& d = v.as_dict();
      if (d.is_namespace) break;
      if (d.items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : d.items) items.push_back(&item);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(level + 1);
        py::append_json_string(out, items[i]->first, o.ensure_ascii);
        out += o.key_separator;
        dump(out, items[i]->second, o, level + 1);
      }
      newline(level);
      out.push_back('}');
      return;
    }
    default: break;
  }
  render_error("Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  dump(out, v, options, 0);
  return out;
}

}  // namespace vlm::jinja
