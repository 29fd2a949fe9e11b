// The per-request sparse-prefill override: "sparse_prefill" at the top level or inside
// "vlm_options" reaches SamplingParams; an unknown value is a 400 naming the field.
#include <gtest/gtest.h>

#include "kernels/core/check.h"
#include "server/openai_request.h"

namespace vlm {
namespace {

ApiRequest parse(const std::string& extra) {
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}";
  return parse_api_request(ApiKind::Chat, body, SamplingDefaults{});
}

TEST(SparsePrefillRequest, ParsesTheOverride) {
  EXPECT_FALSE(parse("").params.sparse_prefill.has_value());
  EXPECT_EQ(parse(R"(,"sparse_prefill":"a_shape")").params.sparse_prefill, SparsePrefillMethod::AShape);
  EXPECT_EQ(parse(R"(,"vlm_options":{"sparse_prefill":"vertical-slash"})").params.sparse_prefill,
            SparsePrefillMethod::VerticalSlash);
  EXPECT_EQ(parse(R"(,"vlm_options":{"sparse_prefill":"off"})").params.sparse_prefill, SparsePrefillMethod::Off);
  EXPECT_EQ(parse(R"(,"sparse_prefill":"tri_shape")").params.sparse_prefill, SparsePrefillMethod::TriShape);
}

TEST(SparsePrefillRequest, RejectsUnknownMethods) {
  try {
    parse(R"(,"sparse_prefill":"magic")");
    FAIL() << "no error";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "sparse_prefill");
  }
  EXPECT_THROW(parse(R"(,"vlm_options":7)"), RequestError);
  EXPECT_THROW(parse(R"(,"sparse_prefill":3)"), RequestError);
}

}  // namespace
}  // namespace vlm
