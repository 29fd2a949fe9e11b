// The syntax tree the parser builds and the evaluator walks. Every node keeps the 1-based
// line and column of its first token for error messages. Filters and tests are resolved to
// their implementations at parse time, so an unknown name fails when the template loads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/chat/jinja/value.h"

namespace vlm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// A filter implementation: value | name(args...).
using FilterFn = Value (*)(Evaluator&, const Value& value, CallArgs& args);
// A test implementation: value is name(args...).
using TestFn = bool (*)(Evaluator&, const Value& value, CallArgs& args);

struct Position {
  int line = 0;
  int column = 0;
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

enum class ExprKind {
  kLiteral, kName, kList, kTuple, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest,
  kUnary, kBinary, kCompare, kCondition,
};

struct Expr {
  explicit Expr(ExprKind k, Position p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  Position pos;
};

struct LiteralExpr : Expr {
  LiteralExpr(Position p, Value v) : Expr(ExprKind::kLiteral, p), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(Position p, std::string n) : Expr(ExprKind::kName, p), name(std::move(n)) {}
  std::string name;
};

// [a, b], (a, b) and {k: v}.
struct SequenceExpr : Expr {
  using Expr::Expr;
  std::vector<ExprPtr> items;
};
struct DictExpr : Expr {
  explicit DictExpr(Position p) : Expr(ExprKind::kDict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

// obj.name (attribute first, then item) and obj[key] (item first, then attribute).
struct GetAttrExpr : Expr {
  GetAttrExpr(Position p, ExprPtr o, std::string n)
      : Expr(ExprKind::kGetAttr, p), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};
struct GetItemExpr : Expr {
  GetItemExpr(Position p, ExprPtr o, ExprPtr k)
      : Expr(ExprKind::kGetItem, p), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;
};
// obj[start:stop:step]; absent parts are null.
struct SliceExpr : Expr {
  explicit SliceExpr(Position p) : Expr(ExprKind::kSlice, p) {}
  ExprPtr object, start, stop, step;
};

struct CallExpr : Expr {
  CallExpr(Position p, ExprPtr c) : Expr(ExprKind::kCall, p), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};

struct FilterExpr : Expr {
  FilterExpr(Position p, ExprPtr o) : Expr(ExprKind::kFilter, p), operand(std::move(o)) {}
  ExprPtr operand;  // null inside {% filter %} blocks (the block's output is the operand)
  std::string name;
  FilterFn fn = nullptr;
  Arguments args;
};

struct TestExpr : Expr {
  TestExpr(Position p, ExprPtr o) : Expr(ExprKind::kTest, p), operand(std::move(o)) {}
  ExprPtr operand;
  std::string name;
  TestFn fn = nullptr;
  bool negated = false;
  Arguments args;
};

// not, unary - and +.
struct UnaryExpr : Expr {
  UnaryExpr(Position p, std::string o, ExprPtr e)
      : Expr(ExprKind::kUnary, p), op(std::move(o)), operand(std::move(e)) {}
  std::string op;
  ExprPtr operand;
};

// + - * / // % ** ~ and or.
struct BinaryExpr : Expr {
  BinaryExpr(Position p, std::string o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, p), op(std::move(o)), left(std::move(l)), right(std::move(r)) {}
  std::string op;
  ExprPtr left, right;
};

// a < b <= c ... chained like Python; ops: == != < <= > >= in notin.
struct CompareExpr : Expr {
  CompareExpr(Position p, ExprPtr f) : Expr(ExprKind::kCompare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;
};

// then if cond else otherwise; otherwise may be null (undefined).
struct ConditionExpr : Expr {
  explicit ConditionExpr(Position p) : Expr(ExprKind::kCondition, p) {}
  ExprPtr cond, then, otherwise;
};

enum class StmtKind {
  kText, kOutput, kIf, kFor, kSet, kSetAttr, kSetBlock, kMacro, kBreak, kContinue, kFilterBlock,
  kScope,
};

struct Stmt {
  Stmt(StmtKind k, Position p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  Position pos;
};

struct TextStmt : Stmt {
  TextStmt(Position p, std::string t) : Stmt(StmtKind::kText, p), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt(Position p, ExprPtr e) : Stmt(StmtKind::kOutput, p), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(Position p) : Stmt(StmtKind::kIf, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if and elifs
  Body otherwise;
};

struct ForStmt : Stmt {
  explicit ForStmt(Position p) : Stmt(StmtKind::kFor, p) {}
  std::vector<std::string> targets;  // one name, or several to unpack
  bool unpack = false;
  ExprPtr iterable;
  ExprPtr filter;  // for x in xs if cond; may be null
  Body body;
  Body otherwise;  // runs when no item was iterated
};

// set a = expr; set a, b = expr.
struct SetStmt : Stmt {
  explicit SetStmt(Position p) : Stmt(StmtKind::kSet, p) {}
  std::vector<std::string> targets;
  bool unpack = false;
  ExprPtr value;
};

// set ns.attr = expr.
struct SetAttrStmt : Stmt {
  explicit SetAttrStmt(Position p) : Stmt(StmtKind::kSetAttr, p) {}
  std::string object;
  std::string attr;
  ExprPtr value;
};

// set name %}body{% endset, optionally with filters applied to the body.
struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(Position p) : Stmt(StmtKind::kSetBlock, p) {}
  std::string target;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(Position p) : Stmt(StmtKind::kMacro, p) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(Position p) : Stmt(StmtKind::kFilterBlock, p) {}
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};

// A body with its own variable scope ({% with %}), or none (HF's {% generation %} block).
struct ScopeStmt : Stmt {
  explicit ScopeStmt(Position p) : Stmt(StmtKind::kScope, p) {}
  bool new_scope = true;
  std::vector<std::pair<std::string, ExprPtr>> assignments;
  Body body;
};

}  // namespace vlm::jinja
