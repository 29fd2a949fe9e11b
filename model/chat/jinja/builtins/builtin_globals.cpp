// Global functions (range, namespace, dict, raise_exception, strftime_now) and ArgBinder.
#include <ctime>

#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/evaluator.h"


// GCC 12 reports a false -Wrestrict inside std::string's operator+ ("x" + str) at -O3
// (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"
namespace vlm::jinja {

ArgBinder::ArgBinder(std::string_view function, CallArgs& args,
                     std::initializer_list<std::string_view> params, size_t num_required)
    : given_(params.size(), nullptr) {
  std::string fn(function);
  if (args.positional.size() > params.size()) {
    render_error(fn + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
                 std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) given_[i] = &args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    for (std::string_view p : params) {
      if (p == key) break;
      ++i;
    }
    if (i == params.size()) render_error(fn + "() got an unexpected keyword argument '" + key + "'");
    if (given_[i]) render_error(fn + "() got multiple values for argument '" + key + "'");
    given_[i] = &value;
  }
  size_t i = 0;
  for (std::string_view p : params) {
    if (i < num_required && !given_[i])
      render_error(fn + "() missing required argument '" + std::string(p) + "'");
    ++i;
  }
}

const Value& ArgBinder::get(size_t i) const { return *given_[i]; }

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses larger ranges

Value range_fn(Evaluator&, CallArgs& args) {
  if (!args.keyword.empty()) render_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) render_error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  for (const Value& v : p)
    if (!v.is_integral()) render_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop = 0, step = 1;
  if (p.size() == 1) {
    stop = p[0].as_int();
  } else {
    start = p[0].as_int();
    stop = p[1].as_int();
    if (p.size() == 3) step = p[2].as_int();
  }
  if (step == 0) render_error("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange)
      render_error("range too big: the sandbox blocks ranges larger than 100000");
    out.emplace_back(i);
  }
  return Value::list(std::move(out));
}

Value namespace_fn(Evaluator& ev, CallArgs& args) {
  auto d = std::make_shared<Dict>();
  d->is_namespace = true;
  ev.track_namespace(d);
  if (args.positional.size() > 1) render_error("namespace() takes at most 1 positional argument");
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (!init.is_mapping()) render_error("namespace() argument must be a mapping, not " + type_name(init));
    d->items = init.as_dict().items;
  }
  for (auto& [k, v] : args.keyword) d->set(k, v);
  return Value(std::move(d));
}

Value dict_fn(Evaluator&, CallArgs& args) {
  auto d = std::make_shared<Dict>();
  if (args.positional.size() > 1) render_error("dict expected at most 1 argument");
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (init.is_mapping()) {
      d->items = init.as_dict().items;
    } else {
      for (const Value& pair : iterate(init)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2 || !kv[0].is_string()) render_error("dict() needs (string key, value) pairs");
        d->set(kv[0].as_string(), kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d->set(k, v);
  return Value(std::move(d));
}

Value raise_exception_fn(Evaluator&, CallArgs& args) {
  ArgBinder a("raise_exception", args, {"message"}, 1);
  throw Error(ErrorKind::kRaised, to_str(a.get(0)));
}

Value strftime_now_fn(Evaluator&, CallArgs& args) {
  ArgBinder a("strftime_now", args, {"format"}, 1);
  if (!a.get(0).is_string()) render_error("strftime_now() argument must be str");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string fmt = a.get(0).as_string();
  if (fmt.empty()) return Value(std::string());
  std::string buf(256 + fmt.size() * 16, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &local);
  buf.resize(n);
  return Value(std::move(buf));
}

}  // namespace

void add_globals(Scope& scope) {
  scope.set("range", Value::function("range", range_fn));
  scope.set("namespace", Value::function("namespace", namespace_fn));
  scope.set("dict", Value::function("dict", dict_fn));
  scope.set("raise_exception", Value::function("raise_exception", raise_exception_fn));
  scope.set("strftime_now", Value::function("strftime_now", strftime_now_fn));
}

}  // namespace vlm::jinja
