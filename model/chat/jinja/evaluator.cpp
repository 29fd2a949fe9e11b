#include "model/chat/jinja/evaluator.h"

#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/operators.h"

namespace vlm::jinja {

namespace {
constexpr int kMaxMacroDepth = 100;
}

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    for (const auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(std::string name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::move(name), std::move(value));
}

std::string Evaluator::render(const Body& body, const std::shared_ptr<Scope>& root) {
  std::string out;
  try {
    exec(body, root, out);
  } catch (...) {
    release_cycles();
    throw;
  }
  release_cycles();
  return out;
}

void Evaluator::release_cycles() {
  for (const auto& scope : closure_scopes_) scope->vars.clear();
  for (const auto& ns : namespaces_) ns->items.clear();
  closure_scopes_.clear();
  namespaces_.clear();
}

Evaluator::Flow Evaluator::exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  for (const StmtPtr& s : body) {
    Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  try {
    switch (s.kind) {
      case StmtKind::kText: out += static_cast<const TextStmt&>(s).text; return Flow::kNormal;
      case StmtKind::kOutput:
        out += to_str(eval(*static_cast<const OutputStmt&>(s).expr, scope));
        return Flow::kNormal;
      case StmtKind::kIf: {
        const auto& st = static_cast<const IfStmt&>(s);
        for (const auto& [cond, body] : st.branches)
          if (truthy(eval(*cond, scope))) return exec(body, scope, out);
        return exec(st.otherwise, scope, out);
      }
      case StmtKind::kFor: return exec_for(static_cast<const ForStmt&>(s), scope, out);
      case StmtKind::kSet: {
        const auto& st = static_cast<const SetStmt&>(s);
        assign(st.targets, st.unpack, eval(*st.value, scope), *scope);
        return Flow::kNormal;
      }
      case StmtKind::kSetAttr: {
        const auto& st = static_cast<const SetAttrStmt&>(s);
        const Value* obj = scope->find(st.object);
        if (!obj || !obj->is_namespace()) render_error("cannot assign attribute on non-namespace object");
        Value v = eval(*st.value, scope);
        obj->as_dict().set(st.attr, std::move(v));
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        const auto& st = static_cast<const SetBlockStmt&>(s);
        std::string text;
        exec(st.body, scope, text);
        Value v(std::move(text));
        for (const auto& f : st.filters) v = eval_filter(*f, std::move(v), scope);
        scope->set(st.target, std::move(v));
        return Flow::kNormal;
      }
      case StmtKind::kMacro: {
        const auto& st = static_cast<const MacroStmt&>(s);
        scope->set(st.name, make_macro(st, scope));
        return Flow::kNormal;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kFilterBlock: {
        const auto& st = static_cast<const FilterBlockStmt&>(s);
        std::string text;
        Flow f = exec(st.body, scope, text);
        Value v(std::move(text));
        for (const auto& fe : st.filters) v = eval_filter(*fe, std::move(v), scope);
        out += to_str(v);
        return f;
      }
      case StmtKind::kScope: {
        const auto& st = static_cast<const ScopeStmt&>(s);
        if (!st.new_scope) return exec(st.body, scope, out);
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [name, e] : st.assignments) inner->set(name, eval(*e, scope));
        return exec(st.body, inner, out);
      }
    }
  } catch (const Error& e) {
    if (!e.has_position()) throw e.with_position(s.pos.line, s.pos.column);
    throw;
  }
  return Flow::kNormal;
}

void Evaluator::assign(const std::vector<std::string>& targets, bool unpack, const Value& value,
                       Scope& scope) {
  if (!unpack) {
    scope.set(targets[0], value);
    return;
  }
  std::vector<Value> items = iterate(value);
  if (items.size() > targets.size())
    render_error("too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  if (items.size() < targets.size())
    render_error("not enough values to unpack (expected " + std::to_string(targets.size()) +
                 ", got " + std::to_string(items.size()) + ")");
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
}

Evaluator::Flow Evaluator::exec_for(const ForStmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.iterable, scope));
  if (s.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      auto probe = std::make_shared<Scope>(scope);
      assign(s.targets, s.unpack, item, *probe);
      if (truthy(eval(*s.filter, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.otherwise, scope, out);
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    auto iter = std::make_shared<Scope>(scope);
    auto cycle = [i](Evaluator&, CallArgs& a) -> Value {
      if (a.positional.empty()) render_error("no items for cycling given");
      return a.positional[static_cast<size_t>(i) % a.positional.size()];
    };
    Value loop = Value::dict({
        {"index", Value(i + 1)},
        {"index0", Value(i)},
        {"revindex", Value(n - i)},
        {"revindex0", Value(n - i - 1)},
        {"first", Value(i == 0)},
        {"last", Value(i == n - 1)},
        {"length", Value(n)},
        {"depth", Value(1)},
        {"depth0", Value(0)},
        {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item")},
        {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item")},
        {"cycle", Value::function("loop.cycle", cycle)},
    });
    iter->set("loop", std::move(loop));
    assign(s.targets, s.unpack, items[static_cast<size_t>(i)], *iter);
    if (exec(s.body, iter, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Evaluator::make_macro(const MacroStmt& m, const std::shared_ptr<Scope>& scope) {
  const MacroStmt* macro = &m;
  std::shared_ptr<Scope> defined_in = scope;
  closure_scopes_.push_back(scope);
  return Value::function(m.name, [macro, defined_in](Evaluator& ev, CallArgs& args) -> Value {
    if (ev.depth_ >= kMaxMacroDepth) render_error("maximum macro recursion depth exceeded");
    auto call_scope = std::make_shared<Scope>(defined_in);
    const auto& params = macro->params;
    std::vector<bool> bound(params.size(), false);
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        call_scope->set(params[i].first, args.positional[i]);
        bound[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    std::vector<std::pair<std::string, Value>> kwargs;
    for (auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < params.size() && params[i].first != key) ++i;
      if (i == params.size()) {
        kwargs.emplace_back(key, value);
        continue;
      }
      if (bound[i]) render_error("macro '" + macro->name + "' got multiple values for argument '" + key + "'");
      call_scope->set(key, value);
      bound[i] = true;
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) continue;
      call_scope->set(params[i].first,
                      params[i].second ? ev.eval(*params[i].second, call_scope)
                                       : Value::undefined("parameter '" + params[i].first + "' was not provided"));
    }
    call_scope->set("varargs", Value::list(std::move(varargs), true));
    call_scope->set("kwargs", Value::dict(std::move(kwargs)));
    std::string out;
    ++ev.depth_;
    try {
      ev.exec(macro->body, call_scope, out);
    } catch (...) {
      --ev.depth_;
      throw;
    }
    --ev.depth_;
    return Value(std::move(out));
  });
}

Value Evaluator::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  try {
    return eval_inner(e, scope);
  } catch (const Error& err) {
    if (!err.has_position()) throw err.with_position(e.pos.line, e.pos.column);
    throw;
  }
}

CallArgs Evaluator::eval_args(const Arguments& a, const std::shared_ptr<Scope>& scope) {
  CallArgs args;
  for (const ExprPtr& p : a.positional) args.positional.push_back(eval(*p, scope));
  for (const auto& [k, v] : a.keyword) args.keyword.emplace_back(k, eval(*v, scope));
  return args;
}

Value Evaluator::eval_filter(const FilterExpr& f, Value operand, const std::shared_ptr<Scope>& scope) {
  CallArgs args = eval_args(f.args, scope);
  try {
    return f.fn(*this, operand, args);
  } catch (const Error& err) {
    if (!err.has_position()) throw err.with_position(f.pos.line, f.pos.column);
    throw;
  }
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.as_callable().fn(*this, args);
  fail_if_undefined(callee);
  render_error("'" + type_name(callee) + "' object is not callable");
}

Value Evaluator::apply_filter(std::string_view name, const Value& value, CallArgs& args) {
  FilterFn fn = find_filter(name);
  if (!fn) render_error("no filter named '" + std::string(name) + "'");
  return fn(*this, value, args);
}

bool Evaluator::apply_test(std::string_view name, const Value& value, CallArgs& args) {
  TestFn fn = find_test(name);
  if (!fn) render_error("no test named '" + std::string(name) + "'");
  return fn(*this, value, args);
}

Value Evaluator::eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case ExprKind::kLiteral: return static_cast<const LiteralExpr&>(e).value;
    case ExprKind::kName: {
      const auto& n = static_cast<const NameExpr&>(e);
      if (const Value* v = scope->find(n.name)) return *v;
      return Value::undefined("'" + n.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const ExprPtr& item : static_cast<const SequenceExpr&>(e).items) items.push_back(eval(*item, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k, scope);
        if (!key.is_string()) render_error("dict keys other than strings are not supported (got " + type_name(key) + ")");
        d->set(key.as_string(), eval(*v, scope));
      }
      return Value(std::move(d));
    }
    case ExprKind::kGetAttr: {
      const auto& g = static_cast<const GetAttrExpr&>(e);
      return get_attr(eval(*g.object, scope), g.name);
    }
    case ExprKind::kGetItem: {
      const auto& g = static_cast<const GetItemExpr&>(e);
      Value obj = eval(*g.object, scope);
      return get_item(obj, eval(*g.key, scope));
    }
    case ExprKind::kSlice: {
      const auto& s = static_cast<const SliceExpr&>(e);
      Value obj = eval(*s.object, scope);
      auto part = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value::none(); };
      Value start = part(s.start), stop = part(s.stop), step = part(s.step);
      return slice(obj, start, stop, step);
    }
    case ExprKind::kCall: {
      const auto& c = static_cast<const CallExpr&>(e);
      Value callee = eval(*c.callee, scope);
      CallArgs args = eval_args(c.args, scope);
      return call(callee, args);
    }
    case ExprKind::kFilter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      return eval_filter(f, eval(*f.operand, scope), scope);
    }
    case ExprKind::kTest: {
      const auto& t = static_cast<const TestExpr&>(e);
      Value v = eval(*t.operand, scope);
      CallArgs args = eval_args(t.args, scope);
      return Value(t.fn(*this, v, args) != t.negated);
    }
    case ExprKind::kUnary: {
      const auto& u = static_cast<const UnaryExpr&>(e);
      Value v = eval(*u.operand, scope);
      if (u.op == "not") return Value(!truthy(v));
      return u.op == "-" ? negate(v) : unary_plus(v);
    }
    case ExprKind::kBinary: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value left = eval(*b.left, scope);
      if (b.op == "and") return truthy(left) ? eval(*b.right, scope) : left;
      if (b.op == "or") return truthy(left) ? left : eval(*b.right, scope);
      return binary_op(b.op, left, eval(*b.right, scope));
    }
    case ExprKind::kCompare: {
      const auto& c = static_cast<const CompareExpr&>(e);
      Value left = eval(*c.first, scope);
      for (const auto& [op, rhs] : c.rest) {
        Value right = eval(*rhs, scope);
        bool ok;
        if (op == "==") ok = equals(left, right);
        else if (op == "!=") ok = !equals(left, right);
        else if (op == "<") ok = less_than(left, right);
        else if (op == ">") ok = less_than(right, left);
        else if (op == "<=") ok = less_than(left, right) || equals(left, right);
        else if (op == ">=") ok = less_than(right, left) || equals(left, right);
        else if (op == "in") ok = contains(right, left);
        else ok = !contains(right, left);
        if (!ok) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCondition: {
      const auto& c = static_cast<const ConditionExpr&>(e);
      if (truthy(eval(*c.cond, scope))) return eval(*c.then, scope);
      if (c.otherwise) return eval(*c.otherwise, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.pos.line) +
                              " evaluated to false and no else section was defined");
    }
  }
  return Value();
}

}  // namespace vlm::jinja
