// EBNF grammars (vLLM's structured_outputs.grammar) -> Grammar, in the GBNF form llama.cpp
// and xgrammar read:
//   root   ::= "{" ws pair ("," ws pair)* "}"     # comments run to the end of the line
//   pair   ::= [a-z]+ ":" [0-9]{1,3}
// Rules `name ::= alternatives`; a rule's body runs until the next `name ::=`. Items: "literal"
// (escapes \n \r \t \\ \" \xHH \uHHHH), [character classes] (as in engine/structured/regex_compiler.h),
// `.` (any character), rule names, groups ( ... ), alternation |, and the quantifiers * + ?
// {n} {n,} {n,m}. The start rule is `root`. Throws std::invalid_argument naming the problem
// (undefined rule, syntax, left recursion).
#pragma once

#include <string_view>

#include "engine/structured/grammar.h"

namespace vlm::structured {

Grammar compile_ebnf(std::string_view text);

}  // namespace vlm::structured
