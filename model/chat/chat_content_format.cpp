#include "model/chat/chat_content_format.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace vlm {
namespace {

using namespace jinja;

// Every for loop and every single-name set statement of the template, at any depth (macros,
// if branches, loop bodies, blocks), in source order.
struct Statements {
  std::vector<const ForStmt*> loops;
  std::vector<const SetStmt*> sets;
};

void collect(const Body& body, Statements& out) {
  for (const StmtPtr& s : body) {
    switch (s->kind) {
      case StmtKind::kIf: {
        const auto& st = static_cast<const IfStmt&>(*s);
        for (const auto& [cond, branch] : st.branches) collect(branch, out);
        collect(st.otherwise, out);
        break;
      }
      case StmtKind::kFor: {
        const auto& st = static_cast<const ForStmt&>(*s);
        out.loops.push_back(&st);
        collect(st.body, out);
        collect(st.otherwise, out);
        break;
      }
      case StmtKind::kSet: {
        const auto& st = static_cast<const SetStmt&>(*s);
        if (!st.unpack && st.targets.size() == 1) out.sets.push_back(&st);
        break;
      }
      case StmtKind::kSetBlock: collect(static_cast<const SetBlockStmt&>(*s).body, out); break;
      case StmtKind::kMacro: collect(static_cast<const MacroStmt&>(*s).body, out); break;
      case StmtKind::kFilterBlock: collect(static_cast<const FilterBlockStmt&>(*s).body, out); break;
      case StmtKind::kScope: collect(static_cast<const ScopeStmt&>(*s).body, out); break;
      default: break;
    }
  }
}

bool is_name(const Expr* e, const std::string& name) {
  return e && e->kind == ExprKind::kName && static_cast<const NameExpr*>(e)->name == name;
}

// var.key or var['key'].
bool is_attr(const Expr* e, const std::string& var, const std::string& key) {
  if (!e) return false;
  if (e->kind == ExprKind::kGetAttr) {
    const auto* g = static_cast<const GetAttrExpr*>(e);
    return is_name(g->object.get(), var) && g->name == key;
  }
  if (e->kind == ExprKind::kGetItem) {
    const auto* g = static_cast<const GetItemExpr*>(e);
    if (!is_name(g->object.get(), var) || !g->key || g->key->kind != ExprKind::kLiteral) return false;
    const Value& k = static_cast<const LiteralExpr*>(g->key.get())->value;
    return k.is_string() && k.as_string() == key;
  }
  return false;
}

// `var` (or var.key when key is set), also under filters (var | selectattr(...)), tests and
// slices (var[1:]).
bool is_var_or_elems(const Expr* e, const std::string& var, const std::string* key = nullptr) {
  if (!e) return false;
  switch (e->kind) {
    case ExprKind::kFilter: return is_var_or_elems(static_cast<const FilterExpr*>(e)->operand.get(), var, key);
    case ExprKind::kTest: return is_var_or_elems(static_cast<const TestExpr*>(e)->operand.get(), var, key);
    case ExprKind::kSlice: return is_var_or_elems(static_cast<const SliceExpr*>(e)->object.get(), var, key);
    default: return key ? is_attr(e, var, *key) : is_name(e, var);
  }
}

}  // namespace

const char* chat_content_format_name(ChatContentFormat format) {
  return format == ChatContentFormat::OpenAI ? "openai" : "string";
}

std::optional<ChatContentFormat> parse_chat_content_format(std::string_view value) {
  if (value == "auto") return std::nullopt;
  if (value == "string") return ChatContentFormat::String;
  if (value == "openai") return ChatContentFormat::OpenAI;
  throw std::invalid_argument("chat template content format must be auto, string or openai, got '" +
                              std::string(value) + "'");
}

ChatContentFormat detect_chat_content_format(const jinja::Template& tmpl) {
  Statements st;
  collect(tmpl.body(), st);
  // `messages` and the names assigned from it, transitively.
  std::vector<std::string> lists{"messages"};
  for (size_t i = 0; i < lists.size(); ++i)
    for (const SetStmt* s : st.sets)
      if (is_var_or_elems(s->value.get(), lists[i]) &&
          std::find(lists.begin(), lists.end(), s->targets[0]) == lists.end())
        lists.push_back(s->targets[0]);
  // The loop variables that walk them: the messages.
  std::vector<std::string> messages;
  for (const ForStmt* f : st.loops)
    if (!f->unpack && f->targets.size() == 1)
      for (const std::string& l : lists)
        if (is_var_or_elems(f->iterable.get(), l)) {
          messages.push_back(f->targets[0]);
          break;
        }
  static const std::string kContent = "content";
  for (const ForStmt* f : st.loops) {
    if (is_name(f->iterable.get(), kContent)) return ChatContentFormat::OpenAI;
    for (const std::string& m : messages)
      if (is_var_or_elems(f->iterable.get(), m, &kContent)) return ChatContentFormat::OpenAI;
  }
  return ChatContentFormat::String;
}

bool template_supports_developer_role(std::string_view source) {
  return source.find("\"developer\"") != std::string_view::npos || source.find("'developer'") != std::string_view::npos;
}

}  // namespace vlm
