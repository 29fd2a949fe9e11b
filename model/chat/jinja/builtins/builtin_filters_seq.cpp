// Filters on sequences and mappings: first, last, list, join, items, dictsort, sort, unique,
// reverse, sum, min, max, map, select, reject, selectattr, rejectattr, batch.
#include <algorithm>

#include "model/chat/jinja/builtins/builtin_filters_impl.h"
#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/evaluator.h"
#include "model/chat/jinja/operators.h"
#include "model/chat/jinja/builtins/py_string.h"

namespace vlm::jinja {
namespace {

// jinja2's make_attrgetter: "a.b.0" looks up items (then attributes) part by part.
Value get_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  for (const std::string& part : py::split(attribute.as_string(), std::string("."), -1)) {
    // At most 18 digits: an index that fits int64 (a longer one cannot match an item).
    bool digits = !part.empty() && part.size() <= 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return v;
}

// Sort / compare key: the attribute (or the item), lowercased unless case-sensitive.
Value sort_key(const Value& item, const Value* attribute, bool case_sensitive) {
  Value v = attribute ? get_path(item, *attribute) : item;
  if (!case_sensitive && v.is_string()) return Value(py::lower(v.as_string()));
  return v;
}

bool flag(const ArgBinder& a, size_t i) { return a.has(i) && truthy(a.get(i)); }
const Value* opt(const ArgBinder& a, size_t i) {
  return a.has(i) && !a.get(i).is_none() ? &a.get(i) : nullptr;
}

Value f_first(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("first", args, {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("last", args, {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_list(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("list", args, {});
  return Value::list(iterate(v));
}

Value f_join(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  std::string sep = a.has(0) ? to_str(a.get(0)) : std::string();
  const Value* attribute = opt(a, 1);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    out += to_str(attribute ? get_path(item, *attribute) : item);
    first = false;
  }
  return Value(std::move(out));
}

Value f_items(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("items", args, {});
  if (v.is_undefined()) return Value::list();
  if (!v.is_mapping()) render_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::list({Value(k), val}, true));
  return Value::list(std::move(out));
}

Value f_dictsort(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_mapping()) render_error("dictsort: a mapping is required, got " + type_name(v));
  bool case_sensitive = flag(a, 0);
  std::string by = a.has(1) ? to_str(a.get(1)) : "key";
  if (by != "key" && by != "value") render_error("You can only sort by either \"key\" or \"value\"");
  bool reverse = flag(a, 2);
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.as_dict().items) pairs.push_back(Value::list({Value(k), val}, true));
  size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(x.as_list().items[pos], nullptr, case_sensitive);
    Value ky = sort_key(y.as_list().items[pos], nullptr, case_sensitive);
    return reverse ? less_than(ky, kx) : less_than(kx, ky);
  });
  return Value::list(std::move(pairs));
}

Value f_sort(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool reverse = flag(a, 0), case_sensitive = flag(a, 1);
  const Value* attribute = opt(a, 2);
  std::vector<Value> items = iterate(v);
  std::vector<Value> attrs;
  if (attribute && attribute->is_string()) {
    for (const std::string& part : py::split(attribute->as_string(), std::string(","), -1))
      attrs.emplace_back(py::strip(part, std::nullopt, true, true));
  } else if (attribute) {
    attrs.push_back(*attribute);
  }
  auto key = [&](const Value& item) {
    if (attrs.size() <= 1) return sort_key(item, attrs.empty() ? nullptr : &attrs[0], case_sensitive);
    std::vector<Value> parts;
    for (const Value& at : attrs) parts.push_back(sort_key(item, &at, case_sensitive));
    return Value::list(std::move(parts), true);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_unique(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  bool case_sensitive = flag(a, 0);
  const Value* attribute = opt(a, 1);
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    Value k = sort_key(item, attribute, case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(std::move(k));
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_reverse(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("reverse", args, {});
  if (v.is_string()) {
    std::u32string u = py::decode_utf8(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value(py::encode_utf8(u));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sum(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  const Value* attribute = opt(a, 0);
  Value total = a.get_or(1, Value(0));
  for (const Value& item : iterate(v)) total = binary_op("+", total, attribute ? get_path(item, *attribute) : item);
  return total;
}

Value min_or_max(const Value& v, CallArgs& args, bool want_max) {
  ArgBinder a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool case_sensitive = flag(a, 0);
  const Value* attribute = opt(a, 1);
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(items[i], attribute, case_sensitive);
    if (want_max ? less_than(best_key, k) : less_than(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Value f_min(Evaluator&, const Value& v, CallArgs& args) { return min_or_max(v, args, false); }
Value f_max(Evaluator&, const Value& v, CallArgs& args) { return min_or_max(v, args, true); }

// Splits off the first n positional arguments (names of filters, tests, attributes); the rest
// are passed on to the filter or test.
std::vector<Value> take_leading(CallArgs& args, size_t n) {
  std::vector<Value> lead;
  for (size_t i = 0; i < n && !args.positional.empty(); ++i) {
    lead.push_back(std::move(args.positional.front()));
    args.positional.erase(args.positional.begin());
  }
  return lead;
}

Value f_map(Evaluator& ev, const Value& v, CallArgs& args) {
  std::vector<Value> items = iterate(v);
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [k, val] : args.keyword) {
    if (k == "attribute") attribute = &val;
    else if (k == "default") fallback = &val;
  }
  if (attribute) {
    for (const auto& [k, val] : args.keyword)
      if (k != "attribute" && k != "default") render_error("map: unexpected keyword argument '" + k + "'");
    if (!args.positional.empty()) render_error("map: positional arguments with attribute=");
    for (const Value& item : items) {
      Value r = get_path(item, *attribute);
      out.push_back(r.is_undefined() && fallback ? *fallback : r);
    }
    return Value::list(std::move(out));
  }
  std::vector<Value> lead = take_leading(args, 1);
  if (lead.empty() || !lead[0].is_string()) render_error("map requires a filter name or attribute=");
  for (const Value& item : items) {
    CallArgs copy = args;
    out.push_back(ev.apply_filter(lead[0].as_string(), item, copy));
  }
  return Value::list(std::move(out));
}

Value select_impl(Evaluator& ev, const Value& v, CallArgs& args, bool by_attr, bool keep) {
  const char* name = by_attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  if (!args.keyword.empty()) render_error(std::string(name) + ": keyword arguments are not supported");
  std::vector<Value> lead = take_leading(args, by_attr ? 2 : 1);
  Value attribute;
  if (by_attr) {
    if (lead.empty()) render_error(std::string(name) + ": missing the attribute argument");
    attribute = lead[0];
    lead.erase(lead.begin());
  }
  std::optional<std::string> test;
  if (!lead.empty()) {
    if (!lead[0].is_string()) render_error(std::string(name) + ": the test name must be a string");
    test = lead[0].as_string();
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value probe = by_attr ? get_path(item, attribute) : item;
    bool ok;
    if (test) {
      CallArgs copy = args;
      ok = ev.apply_test(*test, probe, copy);
    } else {
      ok = truthy(probe);
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, false, true); }
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, false, false); }
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, true, true); }
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, true, false); }

Value f_batch(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("batch", args, {"linecount", "fill_with"}, 1);
  if (!a.get(0).is_integral() || a.get(0).as_int() <= 0) render_error("batch: linecount must be a positive integer");
  size_t n = static_cast<size_t>(a.get(0).as_int());
  std::vector<Value> out, cur;
  for (const Value& item : iterate(v)) {
    cur.push_back(item);
    if (cur.size() == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (a.has(1) && !a.get(1).is_none())
      while (cur.size() < n) cur.push_back(a.get(1));
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

}  // namespace

void register_sequence_filters(FilterTable& t) {
  t["first"] = f_first;
  t["last"] = f_last;
  t["list"] = f_list;
  t["join"] = f_join;
  t["items"] = f_items;
  t["dictsort"] = f_dictsort;
  t["sort"] = f_sort;
  t["unique"] = f_unique;
  t["reverse"] = f_reverse;
  t["sum"] = f_sum;
  t["min"] = f_min;
  t["max"] = f_max;
  t["map"] = f_map;
  t["select"] = f_select;
  t["reject"] = f_reject;
  t["selectattr"] = f_selectattr;
  t["rejectattr"] = f_rejectattr;
  t["batch"] = f_batch;
}

}  // namespace vlm::jinja
