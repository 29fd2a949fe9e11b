// Builds the syntax tree from tokens with jinja2's grammar and operator precedence:
//   condexpr: or ['if' or ['else' condexpr]];  or: and ('or' and)*;  and: not ('and' not)*;
//   not: 'not' not | compare;  compare: math1 ((== != < <= > >= in, not in) math1)*;
//   math1: concat ((+ -) concat)*;  concat: math2 ('~' math2)*;  math2: pow ((* / // %) pow)*;
//   pow: unary ('**' unary)*;  unary: ('-' | '+') unary | primary postfix* (filter | test)*.
// Statements: if/elif/else, for (loop filter, else, tuple targets), set (name, tuple,
// namespace attribute, block), macro, filter blocks, with, break/continue, and HF's
// {% generation %}. Anything else fails with a kSyntax jinja::Error naming line and column.
#pragma once

#include <vector>

#include "model/chat/jinja/ast.h"
#include "model/chat/jinja/lexer.h"

namespace vlm::jinja {

Body parse(std::vector<Token> tokens);

}  // namespace vlm::jinja
