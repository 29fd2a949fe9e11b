// plannable_without_host_data: which sparse-prefill configurations the GPU backend plans (from
// the configuration and the device's estimates: grid search, vertical-slash and boundary lines, XAttention)
// and which it refuses.
#include <gtest/gtest.h>

#include <memory>

#include "kernels/sparse_prefill/sparse_prefill_config.h"

namespace vlm {
namespace {

TEST(GpuPlannable, MethodsAndHeadPatterns) {
  SparsePrefillConfig c;
  EXPECT_TRUE(plannable_without_host_data(c));  // off
  for (auto m : {SparsePrefillMethod::AShape, SparsePrefillMethod::TriShape, SparsePrefillMethod::Grid,
                 SparsePrefillMethod::MMInference, SparsePrefillMethod::VerticalSlash,
                 SparsePrefillMethod::XAttention}) {
    c.method = m;
    EXPECT_TRUE(plannable_without_host_data(c)) << sparse_prefill_method_name(m);
  }
  c.method = SparsePrefillMethod::VerticalSlash;
  c.last_q = 128;  // more estimation rows than the device estimate takes
  EXPECT_FALSE(plannable_without_host_data(c));
  c.last_q = 64;
  c.method = SparsePrefillMethod::XAttention;
  c.xattention.stride = 3;  // the device's 64-token blocks need a stride dividing them
  EXPECT_FALSE(plannable_without_host_data(c));
  c.xattention.stride = 16;
  EXPECT_TRUE(plannable_without_host_data(c));
  c.method = SparsePrefillMethod::Grid;
  c.grid.last_q = 128;  // more estimation rows than the device search takes
  EXPECT_FALSE(plannable_without_host_data(c));

  SparsePrefillConfig mm;
  mm.method = SparsePrefillMethod::MMInference;
  auto pats = std::make_shared<SparseHeadPatterns>();
  pats->layers.resize(2);
  HeadPattern h;
  for (auto t : {HeadPatternType::Dense, HeadPatternType::AShape, HeadPatternType::Grid}) {
    h.type = t;
    pats->layers[1].push_back(h);
  }
  mm.head_patterns = pats;
  EXPECT_TRUE(plannable_without_host_data(mm));
  h.type = HeadPatternType::Grid;
  h.boundary = BoundaryKind::Q;  // boundary heads estimate per modality on the device
  pats->layers[0].push_back(h);
  h.boundary = BoundaryKind::TwoD;
  pats->layers[0].push_back(h);
  h.boundary = BoundaryKind::None;
  h.type = HeadPatternType::VerticalSlash;
  pats->layers[0].push_back(h);
  EXPECT_TRUE(plannable_without_host_data(mm));
  mm.last_q = 128;  // their estimate takes at most 64 rows
  EXPECT_FALSE(plannable_without_host_data(mm));
  mm.last_q = 64;
  pats->layers[0].back().type = HeadPatternType::XAttention;
  EXPECT_TRUE(plannable_without_host_data(mm));  // estimated on the device
  pats->layers[0].back().boundary = BoundaryKind::Q;  // XAttention has no boundary variant on the GPU
  EXPECT_FALSE(plannable_without_host_data(mm));
  pats->layers[0].clear();
  mm.default_head.type = HeadPatternType::XAttention;  // estimated on the device
  EXPECT_TRUE(plannable_without_host_data(mm));
  mm.default_head.xattention.stride = 5;
  EXPECT_FALSE(plannable_without_host_data(mm));
}

}  // namespace
}  // namespace vlm
