#include "tests/support/onevision_server_chats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/onevision_fixture.h"

namespace vlm::testing {

double expect_served_onevision_chats_match_hf(const ServerProcess& server, const std::string& root,
                                              const std::string& model_dir, double logprob_tol,
                                              const std::string& label) {
  using nlohmann::json;
  using nlohmann::ordered_json;
  const json cases = json::parse(read_whole_file(model_dir + "/cases.json"));
  EXPECT_EQ(cases.size(), 9u) << label;
  double all_worst = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    const std::vector<int32_t> generated = c["generated_ids"];
    const ordered_json body{{"messages", onevision_openai_messages(c, root)},
                            {"max_tokens", static_cast<int>(generated.size())},
                            {"temperature", 0},
                            {"return_token_ids", true},
                            {"logprobs", true},
                            {"top_logprobs", 5}};
    const HttpResult r = http_request("POST", server.base_url() + "/v1/chat/completions", body.dump());
    if (r.status != 200) {
      ADD_FAILURE() << label << " " << name << ": status " << r.status << ": " << r.body;
      continue;
    }
    const json j = json::parse(r.body);
    const std::vector<int32_t> ours = j["choices"][0]["token_ids"];
    EXPECT_EQ(ours, generated) << label << " " << name << " (HF min logit margin " << c["min_margin"] << ")";
    EXPECT_EQ(j["usage"]["prompt_tokens"], c["input_ids"].size()) << label << " " << name;
    const json& steps = j["choices"][0]["logprobs"]["content"];
    const json& hf = c["top_logprobs"];  // [step][rank] = [id, logprob], best first
    if (steps.size() != hf.size()) {
      ADD_FAILURE() << label << " " << name << ": " << steps.size() << " logprob steps, HF " << hf.size();
      continue;
    }
    double worst = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
      const json& top = steps[s]["top_logprobs"];  // by rank, best first, as HF's
      if (top.size() != hf[s].size()) {
        ADD_FAILURE() << label << " " << name << " step " << s << ": " << top.size() << " top logprobs";
        continue;
      }
      worst = std::max(worst, std::fabs(steps[s]["logprob"].get<double>() - hf[s][0][1].get<double>()));
      for (size_t i = 0; i < top.size(); ++i)
        worst = std::max(worst, std::fabs(top[i]["logprob"].get<double>() - hf[s][i][1].get<double>()));
    }
    EXPECT_LE(worst, logprob_tol) << label << " " << name << ": logprobs against HF f32";
    all_worst = std::max(all_worst, worst);
    std::printf("  %s %-10s %3zu prompt tokens: greedy %s, logprobs within %.2e of HF f32 over %zu steps\n",
                label.c_str(), name.c_str(), c["input_ids"].size(), ours == generated ? "equal" : "DIFFERENT", worst,
                steps.size());
  }
  return all_worst;
}

}  // namespace vlm::testing
