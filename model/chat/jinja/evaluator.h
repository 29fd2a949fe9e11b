// Walks the syntax tree: executes statements into an output string and evaluates
// expressions with jinja2's semantics (undefined values, loop scoping, namespaces, macros).
// Variable scopes chain to their parent; each for-loop iteration, macro call and {% with %}
// gets its own scope, so a plain {% set %} inside them does not leak out (jinja2's rule that
// templates work around with namespace()).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/chat/jinja/ast.h"
#include "model/chat/jinja/value.h"

namespace vlm::jinja {

struct Scope {
  explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const;  // this scope, then its parents
  void set(std::string name, Value value);         // in this scope
};

class Evaluator {
 public:
  // Renders body with root as the template's top-level scope (set at the top level writes there).
  // Throws jinja::Error (kRender or kRaised) with the position of the failing node.
  std::string render(const Body& body, const std::shared_ptr<Scope>& root);

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  // Calls a callable value (a macro, a global function, a bound method).
  Value call(const Value& callee, CallArgs& args);
  // Applies a filter or test by name at run time (map('upper'), select('odd'), ...).
  Value apply_filter(std::string_view name, const Value& value, CallArgs& args);
  bool apply_test(std::string_view name, const Value& value, CallArgs& args);
  // Namespaces are the only mutable values, so the only way to build a reference cycle (with
  // macros, whose closures hold their scope): render() empties the tracked ones when it ends.
  void track_namespace(std::shared_ptr<Dict> ns) { namespaces_.push_back(std::move(ns)); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_for(const ForStmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void assign(const std::vector<std::string>& targets, bool unpack, const Value& value, Scope& scope);
  Value make_macro(const MacroStmt& m, const std::shared_ptr<Scope>& scope);
  Value eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope);
  CallArgs eval_args(const Arguments& a, const std::shared_ptr<Scope>& scope);
  Value eval_filter(const FilterExpr& f, Value operand, const std::shared_ptr<Scope>& scope);

  void release_cycles();

  int depth_ = 0;  // nested macro calls, bounded to keep recursion off the stack limit
  std::vector<std::shared_ptr<Scope>> closure_scopes_;  // scopes holding macros
  std::vector<std::shared_ptr<Dict>> namespaces_;
};

}  // namespace vlm::jinja
