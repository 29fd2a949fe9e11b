#include <gtest/gtest.h>

#include <thread>

#include "kernels/core/check.h"
#include "server/metrics.h"

namespace vlm {
namespace {

TEST(Metrics, RendersPrometheusText) {
  MetricsRegistry m;
  m.declare("vllm:num_requests_running", MetricsRegistry::Type::Gauge, "Requests running.");
  m.declare("vllm:prompt_tokens_total", MetricsRegistry::Type::Counter, "Prompt tokens.");
  m.declare("vllm:time_to_first_token_seconds", MetricsRegistry::Type::Histogram, "TTFT.", {0.1, 1.0});
  const Labels model{{"model_name", "tiny \"q\""}};
  m.set("vllm:num_requests_running", 3, model);
  m.inc("vllm:prompt_tokens_total", model, 5);
  m.inc("vllm:prompt_tokens_total", model, 2);
  m.observe("vllm:time_to_first_token_seconds", 0.05, model);
  m.observe("vllm:time_to_first_token_seconds", 0.5, model);
  m.observe("vllm:time_to_first_token_seconds", 5.0, model);
  const std::string text = m.render();
  EXPECT_NE(text.find("# TYPE vllm:num_requests_running gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:num_requests_running{model_name=\"tiny \\\"q\\\"\"} 3.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:prompt_tokens_total{model_name=\"tiny \\\"q\\\"\"} 7.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{model_name=\"tiny \\\"q\\\"\",le=\"0.1\"} 1.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("le=\"1.0\"} 2.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("le=\"+Inf\"} 3.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_sum{model_name=\"tiny \\\"q\\\"\"} 5.55\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_count{model_name=\"tiny \\\"q\\\"\"} 3.0\n"), std::string::npos) << text;
  EXPECT_EQ(m.value("vllm:prompt_tokens_total", model), 7.0);
}

TEST(Metrics, MisuseIsAnInternalError) {
  MetricsRegistry m;
  m.declare("a", MetricsRegistry::Type::Counter, "a");
  EXPECT_THROW(m.set("a", 1), InternalError);
  EXPECT_THROW(m.inc("missing"), InternalError);
  EXPECT_THROW(m.inc("a", {}, -1), InternalError);
  EXPECT_THROW(m.declare("a", MetricsRegistry::Type::Gauge, "a"), InternalError);
  EXPECT_THROW(m.declare("h", MetricsRegistry::Type::Histogram, "h", {1.0, 0.5}), InternalError);
}

TEST(Metrics, ConcurrentUpdates) {
  MetricsRegistry m;
  m.declare("c", MetricsRegistry::Type::Counter, "c");
  m.declare("h", MetricsRegistry::Type::Histogram, "h", MetricsRegistry::token_latency_buckets());
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        m.inc("c");
        m.observe("h", 0.003);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(m.value("c"), 4000.0);
  EXPECT_NE(m.render().find("h_count 4000.0"), std::string::npos);
}

}  // namespace
}  // namespace vlm
