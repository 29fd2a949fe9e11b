// The Jinja interpreter (model/chat/jinja/) against jinja2 itself: every case of
// tests/fixtures/jinja/jinja_reference.json (tools/fixtures/make_jinja_fixtures.py renders them
// with jinja2 configured as Hugging Face configures it) must give the same output, or fail in
// the same phase. Plus error positions and the pieces jinja2's oracle cannot show.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/chat/jinja/error.h"
#include "model/chat/jinja/json_value.h"
#include "model/chat/jinja/builtins/py_string.h"
#include "model/chat/jinja/template.h"

namespace vlm::jinja {
namespace {

using nlohmann::ordered_json;

std::string render(const std::string& source, const ordered_json& vars = ordered_json::object()) {
  std::vector<std::pair<std::string, Value>> v;
  for (auto it = vars.begin(); it != vars.end(); ++it) v.emplace_back(it.key(), from_json(it.value()));
  return Template::parse(source).render(std::move(v));
}

// The error a template raises (at parse or render time); fails the test when there is none.
Error error_of(const std::string& source, const ordered_json& vars = ordered_json::object()) {
  try {
    render(source, vars);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error from: " << source;
  return Error(ErrorKind::kRender, "none");
}

TEST(JinjaReference, MatchesJinja2OnEveryCase) {
  std::ifstream in(std::string(VLM_FIXTURES_DIR) + "/jinja/jinja_reference.json");
  ASSERT_TRUE(in) << "missing tests/fixtures/jinja/jinja_reference.json";
  ordered_json ref = ordered_json::parse(in);
  const ordered_json& cases = ref["cases"];
  ASSERT_GT(cases.size(), 100u);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    const std::string source = c["template"];
    SCOPED_TRACE(name + ": " + source);
    std::optional<Template> t;
    try {
      t = Template::parse(source);
    } catch (const Error& e) {
      EXPECT_EQ(c.value("error", ""), "syntax") << "unexpected parse error: " << e.what();
      continue;
    }
    if (c.value("error", "") == "syntax") {
      ADD_FAILURE() << "jinja2 rejects this template at compile time; we parsed it";
      continue;
    }
    ordered_json all = ref["base_vars"];
    for (auto it = c["vars"].begin(); it != c["vars"].end(); ++it) all[it.key()] = it.value();
    std::vector<std::pair<std::string, Value>> vars;
    for (auto it = all.begin(); it != all.end(); ++it) vars.emplace_back(it.key(), from_json(it.value()));
    try {
      std::string out = t->render(std::move(vars));
      if (c.contains("output")) EXPECT_EQ(out, c["output"].get<std::string>());
      else ADD_FAILURE() << "jinja2 fails with a " << c["error"] << " error; we rendered: " << out;
    } catch (const Error& e) {
      if (c.contains("output")) {
        ADD_FAILURE() << "unexpected render error: " << e.what();
      } else {
        EXPECT_EQ(c["error"].get<std::string>(), e.kind() == ErrorKind::kRaised ? "raised" : "render") << e.what();
        EXPECT_GT(e.line(), 0) << "render errors carry a position: " << e.what();
      }
    }
  }
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  Error e = error_of("line one\n  {{ 1 + }}");
  EXPECT_EQ(e.kind(), ErrorKind::kSyntax);
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 10);  // the "}}" where an operand was expected
  EXPECT_NE(std::string(e.what()).find("line 2, column 10"), std::string::npos) << e.what();

  e = error_of("a\nb {% frobnicate %}");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 6);
  EXPECT_NE(e.message().find("unknown tag 'frobnicate'"), std::string::npos);

  e = error_of("{{ messages | frobnicate }}");
  EXPECT_EQ(e.column(), 15);
  EXPECT_NE(e.message().find("no filter named 'frobnicate'"), std::string::npos);

  e = error_of("{{ x | urlize }}");
  EXPECT_NE(e.message().find("filter 'urlize' is not supported"), std::string::npos) << e.what();

  e = error_of("{% include 'other.jinja' %}");
  EXPECT_NE(e.message().find("'include' tag is not supported"), std::string::npos) << e.what();

  e = error_of("héllo {{ 'ok' }}\n\n{% for m in messages %}\n  {{ m }}");
  EXPECT_EQ(e.kind(), ErrorKind::kSyntax);
  EXPECT_NE(e.message().find("'endfor'"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("line 3, column 4"), std::string::npos) << "names the opening tag: " << e.what();

  e = error_of("{{ 'unterminated }}");
  EXPECT_EQ(e.line(), 1);
  EXPECT_EQ(e.column(), 4);

  e = error_of("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}");
  EXPECT_NE(e.message().find("nested too deeply"), std::string::npos) << e.what();

  e = error_of("{{ '\\N{BULLET}' }}");
  EXPECT_EQ(e.kind(), ErrorKind::kSyntax);
}

TEST(JinjaErrors, RenderErrorsNameTheFailingNode) {
  Error e = error_of("ok\n{{ 'n=' ~ n }} {{ missing.attr }}", {{"n", 1}});
  EXPECT_EQ(e.kind(), ErrorKind::kRender);
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 26);  // the ".attr"
  EXPECT_NE(e.message().find("'missing' is undefined"), std::string::npos) << e.what();

  e = error_of("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}",
               {{"messages", {{{"content", "x"}}}}});
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(e.message().find("can only concatenate str"), std::string::npos) << e.what();

  e = error_of("{{ raise_exception('Roles must alternate') }}");
  EXPECT_EQ(e.kind(), ErrorKind::kRaised);
  EXPECT_EQ(e.message(), "Roles must alternate");

  e = error_of("{% set l = [] %}{{ l.append(1) }}");
  EXPECT_NE(e.message().find("unsafe"), std::string::npos) << e.what();

  e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.message().find("recursion"), std::string::npos) << e.what();

  e = error_of("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}");
  EXPECT_NE(e.message().find("nested too deeply"), std::string::npos) << e.what();

  e = error_of("{{ 'x' * 100000000 }}");
  EXPECT_NE(e.message().find("too large"), std::string::npos) << e.what();
}

TEST(Jinja, HuggingFaceExtensions) {
  // {% generation %} (HF's assistant-mask tracker) renders its body.
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
  EXPECT_EQ(render("{% for i in [1, 2] %}{% generation %}{{ i }}{% if i == 1 %}{% continue %}{% endif %}!{% endgeneration %}{% endfor %}"), "12!");
  // strftime_now formats the local time.
  char year[8];
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(year, sizeof year, "%Y", &local);
  EXPECT_EQ(render("{{ strftime_now('%Y') }}"), year);
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') | length }}"), "11");
}

TEST(Jinja, ValuesFromJson) {
  ordered_json vars = ordered_json::parse(R"({"o": {"z": 1, "a": [1.5, null, true, "é"]}, "big": 18446744073709551615})");
  EXPECT_EQ(render("{{ o | tojson }}|{{ o }}|{{ big > 1 }}", vars),
            "{\"z\": 1, \"a\": [1.5, null, true, \"é\"]}|{'z': 1, 'a': [1.5, None, True, 'é']}|True");
}

TEST(Jinja, RenderIsRepeatableAndConst) {
  Template t = Template::parse("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
  for (int i = 0; i < 3; ++i) {
    std::vector<std::pair<std::string, Value>> vars;
    vars.emplace_back("xs", Value::list({Value(1), Value(2)}));
    EXPECT_EQ(t.render(std::move(vars)), "3");
  }
}

TEST(PyString, FloatRepr) {
  EXPECT_EQ(py::float_repr(1.0), "1.0");
  EXPECT_EQ(py::float_repr(0.1), "0.1");
  EXPECT_EQ(py::float_repr(1e16), "1e+16");
  EXPECT_EQ(py::float_repr(1.5e16), "1.5e+16");
  EXPECT_EQ(py::float_repr(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(py::float_repr(1e-5), "1e-05");
  EXPECT_EQ(py::float_repr(0.0001), "0.0001");
  EXPECT_EQ(py::float_repr(-2.5), "-2.5");
  EXPECT_EQ(py::float_repr(5e-324), "5e-324");
}

TEST(PyString, ReprQuotesLikePython) {
  EXPECT_EQ(py::repr("a"), "'a'");
  EXPECT_EQ(py::repr("it's"), "\"it's\"");
  EXPECT_EQ(py::repr("'\""), "'\\'\"'");
  EXPECT_EQ(py::repr("\n\t\x01\x7f é"), "'\\n\\t\\x01\\x7f é'");
}

}  // namespace
}  // namespace vlm::jinja
