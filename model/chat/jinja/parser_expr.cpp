// Expression parsing (see parser.h for the grammar).
#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/parser_impl.h"

namespace vlm::jinja {

ExprPtr Parser::parse_tuple(bool with_condexpr, bool explicit_parens,
                            std::initializer_list<std::string_view> extra_end_names) {
  const Token& start = cur();
  auto at_end = [&] {
    const Token& t = cur();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || is_op(t, ")")) return true;
    for (std::string_view n : extra_end_names)
      if (is_name(t, n)) return true;
    return false;
  };
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (at_end()) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail_unexpected(cur(), "an expression");
  }
  auto t = std::make_unique<SequenceExpr>(ExprKind::kTuple, pos_of(start));
  t->items = std::move(items);
  return t;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this, cur());
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    const Token& t = next();
    auto c = std::make_unique<ConditionExpr>(pos_of(t));
    c->then = std::move(expr);
    c->cond = parse_or();
    if (skip_name("else")) c->otherwise = parse_condexpr();
    expr = std::move(c);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const Token& t = next();
    left = std::make_unique<BinaryExpr>(pos_of(t), "or", std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const Token& t = next();
    left = std::make_unique<BinaryExpr>(pos_of(t), "and", std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    const Token& t = next();
    return std::make_unique<UnaryExpr>(pos_of(t), "not", parse_not());
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const Token& start = cur();
  ExprPtr first = parse_math1();
  std::unique_ptr<CompareExpr> cmp;
  while (true) {
    std::string op;
    const Token& t = cur();
    if (t.type == TokenType::kOperator &&
        (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" ||
         t.text == ">=")) {
      op = t.text;
      next();
    } else if (is_name("in")) {
      op = "in";
      next();
    } else if (is_name("not") && is_name(peek(), "in")) {
      op = "notin";
      next();
      next();
    } else {
      break;
    }
    if (!cmp) cmp = std::make_unique<CompareExpr>(pos_of(start), std::move(first));
    cmp->rest.emplace_back(op, parse_math1());
  }
  if (cmp) return cmp;
  return first;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = next();
    left = std::make_unique<BinaryExpr>(pos_of(t), t.text, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const Token& t = next();
    left = std::make_unique<BinaryExpr>(pos_of(t), "~", std::move(left), parse_math2());
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = next();
    left = std::make_unique<BinaryExpr>(pos_of(t), t.text, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary();
  while (is_op("**")) {
    const Token& t = next();
    left = std::make_unique<BinaryExpr>(pos_of(t), "**", std::move(left), parse_unary());
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this, cur());
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& t = next();
    node = std::make_unique<UnaryExpr>(pos_of(t), t.text, parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  Position p = pos_of(t);
  switch (t.type) {
    case TokenType::kName: {
      next();
      const std::string& n = t.text;
      if (n == "true" || n == "True") return std::make_unique<LiteralExpr>(p, Value(true));
      if (n == "false" || n == "False") return std::make_unique<LiteralExpr>(p, Value(false));
      if (n == "none" || n == "None") return std::make_unique<LiteralExpr>(p, Value::none());
      return std::make_unique<NameExpr>(p, n);
    }
    case TokenType::kString: {
      std::string s;
      while (cur().type == TokenType::kString) s += next().text;  // adjacent literals concatenate
      return std::make_unique<LiteralExpr>(p, Value(std::move(s)));
    }
    case TokenType::kInt: next(); return std::make_unique<LiteralExpr>(p, Value(t.int_value));
    case TokenType::kFloat: next(); return std::make_unique<LiteralExpr>(p, Value(t.float_value));
    case TokenType::kOperator:
      if (t.text == "(") {
        next();
        ExprPtr e = parse_tuple(true, true);
        expect_op(")");
        return e;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default: break;
  }
  fail_unexpected(t);
}

ExprPtr Parser::parse_list() {
  const Token& open = next();
  auto l = std::make_unique<SequenceExpr>(ExprKind::kList, pos_of(open));
  while (!is_op("]")) {
    if (!l->items.empty()) expect_op(",");
    if (is_op("]")) break;
    l->items.push_back(parse_expression());
  }
  next();
  return l;
}

ExprPtr Parser::parse_dict() {
  const Token& open = next();
  auto d = std::make_unique<DictExpr>(pos_of(open));
  while (!is_op("}")) {
    if (!d->items.empty()) expect_op(",");
    if (is_op("}")) break;
    ExprPtr key = parse_expression();
    expect_op(":");
    d->items.emplace_back(std::move(key), parse_expression());
  }
  next();
  return d;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    const Token& t = cur();
    if (is_op(t, ".")) {
      next();
      const Token& attr = cur();
      if (attr.type == TokenType::kName) {
        next();
        node = std::make_unique<GetAttrExpr>(pos_of(t), std::move(node), attr.text);
      } else if (attr.type == TokenType::kInt) {
        next();
        auto key = std::make_unique<LiteralExpr>(pos_of(attr), Value(attr.int_value));
        node = std::make_unique<GetItemExpr>(pos_of(t), std::move(node), std::move(key));
      } else {
        fail_unexpected(attr, "an attribute name");
      }
    } else if (is_op(t, "[")) {
      next();
      node = parse_subscript(std::move(node), t);
    } else if (is_op(t, "(")) {
      auto call = std::make_unique<CallExpr>(pos_of(t), std::move(node));
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr object, const Token& at) {
  // After "[": an expression, or a slice start:stop:step with optional parts.
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression();
    if (skip_op("]")) return std::make_unique<GetItemExpr>(pos_of(at), std::move(object), std::move(start));
    if (is_op(",")) fail("subscripts with several keys are not supported", cur());
  }
  auto s = std::make_unique<SliceExpr>(pos_of(at));
  s->object = std::move(object);
  s->start = std::move(start);
  expect_op(":");
  if (!is_op("]") && !is_op(":")) s->stop = parse_expression();
  if (skip_op(":") && !is_op("]")) s->step = parse_expression();
  expect_op("]");
  return s;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      const Token& bar = next();
      node = parse_filter_call(std::move(node), bar);
    } else if (is_name("is")) {
      const Token& t = next();
      node = parse_test(std::move(node), t);
    } else if (is_op("(")) {
      auto call = std::make_unique<CallExpr>(pos_of(cur()), std::move(node));
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_test(ExprPtr operand, const Token& at) {
  auto t = std::make_unique<TestExpr>(pos_of(at), std::move(operand));
  t->negated = skip_name("not");
  const Token& name_tok = cur();
  t->name = expect_name();
  t->fn = find_test(t->name);
  if (!t->fn) {
    fail(is_jinja_test(t->name) ? "the test '" + t->name + "' is not supported"
                                : "no test named '" + t->name + "'",
         name_tok);
  }
  const Token& c = cur();
  if (is_op(c, "(")) {
    t->args = parse_call_args();
  } else if ((c.type == TokenType::kName || c.type == TokenType::kString ||
              c.type == TokenType::kInt || c.type == TokenType::kFloat || is_op(c, "[") ||
              is_op(c, "{")) &&
             !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
    if (is_name(c, "is")) fail("tests cannot be chained with 'is'", c);
    t->args.positional.push_back(parse_postfix(parse_primary()));
  }
  return t;
}

Arguments Parser::parse_call_args() {
  expect_op("(");
  Arguments args;
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported", cur());
    if (cur().type == TokenType::kName && is_op(peek(), "=")) {
      std::string key = next().text;
      next();
      args.keyword.emplace_back(std::move(key), parse_expression());
    } else {
      if (!args.keyword.empty()) fail("positional argument after keyword argument", cur());
      args.positional.push_back(parse_expression());
    }
  }
  next();
  return args;
}

}  // namespace vlm::jinja
