#include "model/chat/jinja/operators.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/builtins/py_string.h"


// GCC 12 reports a false -Wrestrict inside std::string's operator+ ("x" + str) at -O3
// (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"
namespace vlm::jinja {
namespace {

constexpr size_t kMaxRepeat = size_t{64} << 20;  // largest string or list "*" builds

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  render_error("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) +
               "' and '" + type_name(b) + "'");
}

void check_overflow(bool overflow) {
  if (overflow) render_error("integer overflow");
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<size_t>(n) > kMaxRepeat / s.size()) render_error("repeated string too large");
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const List& l = seq.as_list();
  if (!l.items.empty() && static_cast<size_t>(n) > kMaxRepeat / l.items.size()) render_error("repeated list too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.items.begin(), l.items.end());
  return Value::list(std::move(out), l.is_tuple);
}

std::string object_repr(const Value& v) {
  return v.is_none() ? "'None'" : "'" + type_name(v) + " object'";
}

Value missing(const Value& obj, const Value& key) {
  std::string k = key.is_string() ? py::repr(key.as_string()) : repr(key);
  return Value::undefined(object_repr(obj) + " has no attribute " + k);
}

// Normalizes a Python index into [0, n); -1 when out of range.
int64_t index_of(const Value& key, int64_t n) {
  int64_t i = key.as_int();
  if (i < 0) i += n;
  return i >= 0 && i < n ? i : -1;
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value(to_str(a) + to_str(b));
  fail_if_undefined(a);
  fail_if_undefined(b);
  bool ints = a.is_integral() && b.is_integral();
  bool nums = a.is_number() && b.is_number();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      check_overflow(__builtin_add_overflow(a.as_int(), b.as_int(), &r));
      return Value(r);
    }
    if (nums) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
    if (a.is_string())
      render_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      check_overflow(__builtin_sub_overflow(a.as_int(), b.as_int(), &r));
      return Value(r);
    }
    if (nums) return Value(a.as_double() - b.as_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      check_overflow(__builtin_mul_overflow(a.as_int(), b.as_int(), &r));
      return Value(r);
    }
    if (nums) return Value(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(b, a.as_int());
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported(op, a, b);
    if (b.as_double() == 0) render_error("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
    if (!nums) unsupported(op, a, b);
    if (b.as_double() == 0) render_error(ints ? "integer division or modulo by zero" : "float division by zero");
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return op == "//" ? Value(q) : Value(m);
    }
    // CPython's float divmod.
    double x = a.as_double(), y = b.as_double();
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) {
      mod += y;
      div -= 1.0;
    }
    if (op == "%") return Value(mod);
    double floor_div = std::floor(div);
    if (div - floor_div > 0.5) floor_div += 1.0;
    return Value(floor_div);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      while (e-- > 0) check_overflow(__builtin_mul_overflow(acc, base, &acc));
      return Value(acc);
    }
    if (nums) return Value(std::pow(a.as_double(), b.as_double()));
    unsupported(op, a, b);
  }
  render_error("unknown operator " + std::string(op));
}

Value negate(const Value& v) {
  fail_if_undefined(v);
  if (v.is_integral()) return Value(-v.as_int());
  if (v.is_float()) return Value(-v.as_double());
  render_error("bad operand type for unary -: '" + type_name(v) + "'");
}

Value unary_plus(const Value& v) {
  fail_if_undefined(v);
  if (v.is_bool()) return Value(v.as_int());
  if (v.is_number()) return v;
  render_error("bad operand type for unary +: '" + type_name(v) + "'");
}

Value get_attr(const Value& obj, std::string_view name) {
  fail_if_undefined(obj);
  if (obj.is_dict()) {
    if (!obj.as_dict().is_namespace)
      if (auto m = find_attribute(obj, name)) return *m;
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (auto m = find_attribute(obj, name)) {
    return *m;
  }
  return missing(obj, Value(std::string(name)));
}

Value get_item(const Value& obj, const Value& key) {
  fail_if_undefined(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
  } else if (obj.is_list() && key.is_integral()) {
    const auto& items = obj.as_list().items;
    int64_t i = index_of(key, static_cast<int64_t>(items.size()));
    if (i >= 0) return items[static_cast<size_t>(i)];
  } else if (obj.is_string() && key.is_integral()) {
    std::u32string u = py::decode_utf8(obj.as_string());
    int64_t i = index_of(key, static_cast<int64_t>(u.size()));
    if (i >= 0) {
      std::string s;
      py::append_utf8(s, u[static_cast<size_t>(i)]);
      return Value(std::move(s));
    }
  }
  if (key.is_string() && !obj.is_dict())
    if (auto m = find_attribute(obj, key.as_string())) return *m;
  return missing(obj, key);
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  fail_if_undefined(obj);
  auto part = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_integral()) render_error("slice indices must be integers or None");
    return v.as_int();
  };
  std::optional<int64_t> b = part(start), e = part(stop), s = part(step);
  int64_t st = s.value_or(1);
  if (st == 0) render_error("slice step cannot be zero");
  auto pick = [&](int64_t n) {
    // Python's slice.indices(n).
    auto clamp = [&](std::optional<int64_t> v, int64_t def) {
      if (!v) return def;
      int64_t x = *v;
      if (x < 0) x += n;
      if (st > 0) return std::min(std::max<int64_t>(x, 0), n);
      return std::min(std::max<int64_t>(x, -1), n - 1);
    };
    int64_t lo = clamp(b, st > 0 ? 0 : n - 1), hi = clamp(e, st > 0 ? n : -1);
    std::vector<size_t> idx;
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) idx.push_back(static_cast<size_t>(i));
    return idx;
  };
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    std::vector<Value> out;
    for (size_t i : pick(static_cast<int64_t>(items.size()))) out.push_back(items[i]);
    return Value::list(std::move(out), obj.as_list().is_tuple);
  }
  if (obj.is_string()) {
    std::u32string u = py::decode_utf8(obj.as_string());
    std::u32string out;
    for (size_t i : pick(static_cast<int64_t>(u.size()))) out.push_back(u[i]);
    return Value(py::encode_utf8(out));
  }
  return Value::undefined(object_repr(obj) + " has no attribute slice");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string())
        render_error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list().items)
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      if (container.as_dict().is_namespace) break;
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default: break;
  }
  render_error("argument of type '" + type_name(container) + "' is not iterable");
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> list;
  if (args.is_list() && args.as_list().is_tuple) list = args.as_list().items;
  else list.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    size_t j = i + 1;
    std::string flags;
    while (j < fmt.size() && std::string_view("-+ 0#").find(fmt[j]) != std::string_view::npos) flags.push_back(fmt[j++]);
    std::string width, precision;
    while (j < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[j]))) width.push_back(fmt[j++]);
    if (j < fmt.size() && fmt[j] == '.') {
      ++j;
      precision = "0";
      while (j < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[j]))) precision.push_back(fmt[j++]);
    }
    if (j >= fmt.size()) render_error("incomplete format");
    char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= list.size()) render_error("not enough arguments for format string");
    const Value& v = list[next++];
    // Widths and precisions beyond a million are refused rather than allocated (a template
    // could otherwise ask for gigabytes); snprintf below writes at most 512 bytes.
    if (width.size() > 6 || precision.size() > 6) render_error("format width or precision too large");
    std::string spec = "%" + flags + width + (precision.empty() ? "" : "." + precision);
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? to_str(v) : repr(v);
      size_t w = width.empty() ? 0 : std::stoul(width);
      size_t len = static_cast<size_t>(py::num_code_points(s));
      if (!precision.empty() && std::stoul(precision) < len) {
        s = py::encode_utf8(py::decode_utf8(s).substr(0, std::stoul(precision)));
        len = std::stoul(precision);
      }
      std::string pad(w > len ? w - len : 0, ' ');
      out += flags.find('-') != std::string::npos ? s + pad : pad + s;
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number()) render_error("%" + std::string(1, conv) + " format: a real number is required, not " + type_name(v));
      if (v.is_float() && !(std::fabs(v.as_double()) < 9.2e18))  // Python: OverflowError / big int
        render_error("%" + std::string(1, conv) + " format: number out of range");
      long long n = v.is_float() ? static_cast<long long>(v.as_double()) : v.as_int();
      std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
      out += buf;
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G') {
      if (!v.is_number()) render_error("must be real number, not " + type_name(v));
      std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_double());
      out += buf;
    } else {
      render_error(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < list.size()) render_error("not all arguments converted during string formatting");
  return out;
}

}  // namespace vlm::jinja
