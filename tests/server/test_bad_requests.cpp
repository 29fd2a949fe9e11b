// A table of malformed requests against the real vlm-server: each answer's status and OpenAI
// error shape, and the server still healthy afterwards.
#include <gtest/gtest.h>

#include <utility>  // before Asio (Boost 1.74)

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/http/base64.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

struct BadCase {
  std::string name;
  std::string method;
  std::string path;
  std::string body;
  int status;
  std::string param;  // expected error.param ("" = not checked)
  std::vector<std::string> headers = {"Content-Type: application/json"};
};

std::string chat(const std::string& extra) {
  return R"({"model":"demo","messages":[{"role":"user","content":"hi"}])" + (extra.empty() ? "" : "," + extra) + "}";
}
std::string comp(const std::string& extra) {
  return R"({"model":"demo","prompt":"hi")" + (extra.empty() ? "" : "," + extra) + "}";
}
std::string image_message(const std::string& url) {
  return R"({"messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":")" + url + R"("}}]}]})";
}

std::vector<BadCase> cases() {
  const std::string C = "/v1/chat/completions", P = "/v1/completions";
  std::vector<BadCase> t = {
      {"not_json", "POST", C, "{not json", 400, ""},
      {"json_array_body", "POST", C, "[1,2]", 400, ""},
      {"empty_body", "POST", C, "", 400, ""},
      {"json_string_body", "POST", C, "\"hi\"", 400, ""},
      {"missing_messages", "POST", C, R"({"model":"demo"})", 400, "messages"},
      {"messages_not_list", "POST", C, R"({"messages":"hi"})", 400, "messages"},
      {"messages_empty", "POST", C, R"({"messages":[]})", 400, "messages"},
      {"message_not_object", "POST", C, R"({"messages":[3]})", 400, "messages[0]"},
      {"message_no_role", "POST", C, R"({"messages":[{"content":"x"}]})", 400, "messages[0].role"},
      {"message_bad_role", "POST", C, R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role"},
      {"message_role_number", "POST", C, R"({"messages":[{"role":5,"content":"x"}]})", 400, "messages[0].role"},
      // (a message without content is no parts, as in vLLM: accepted)
      {"content_object", "POST", C, R"({"messages":[{"role":"user","content":{"text":"x"}}]})", 400, "messages[0].content"},
      {"content_number", "POST", C, R"({"messages":[{"role":"user","content":7}]})", 400, "messages[0].content"},
      {"part_no_type", "POST", C, R"({"messages":[{"role":"user","content":[{"text":"x"}]}]})", 400, "messages[0].content[0].type"},
      {"part_bad_type", "POST", C, R"({"messages":[{"role":"user","content":[{"type":"audio"}]}]})", 400, "messages[0].content[0].type"},
      {"part_text_not_string", "POST", C, R"({"messages":[{"role":"user","content":[{"type":"text","text":1}]}]})", 400, "messages[0].content[0].text"},
      {"image_url_missing", "POST", C, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", 400, "messages[0].content[0].image_url"},
      {"image_to_text_model", "POST", C, image_message("data:image/png;base64," + base64_encode("\x89PNG")), 400, "messages[0].content[1].image_url"},
      {"temperature_string", "POST", C, chat(R"("temperature":"hot")"), 400, "temperature"},
      {"temperature_negative", "POST", C, chat(R"("temperature":-1)"), 400, "temperature"},
      {"top_p_zero", "POST", C, chat(R"("top_p":0)"), 400, "top_p"},
      {"top_p_above_one", "POST", C, chat(R"("top_p":1.5)"), 400, "top_p"},
      {"top_p_string", "POST", C, chat(R"("top_p":"x")"), 400, "top_p"},
      {"top_k_float", "POST", C, chat(R"("top_k":2.5)"), 400, "top_k"},
      {"top_k_negative", "POST", C, chat(R"("top_k":-7)"), 400, "top_k"},
      {"min_p_above_one", "POST", C, chat(R"("min_p":2)"), 400, "min_p"},
      {"presence_penalty_big", "POST", C, chat(R"("presence_penalty":3)"), 400, "presence_penalty"},
      {"frequency_penalty_small", "POST", C, chat(R"("frequency_penalty":-3)"), 400, "frequency_penalty"},
      {"repetition_penalty_zero", "POST", C, chat(R"("repetition_penalty":0)"), 400, "repetition_penalty"},
      {"max_tokens_zero", "POST", C, chat(R"("max_tokens":0)"), 400, "max_tokens"},
      {"max_tokens_negative", "POST", C, chat(R"("max_tokens":-5)"), 400, "max_tokens"},
      {"max_tokens_string", "POST", C, chat(R"("max_tokens":"10")"), 400, "max_tokens"},
      {"max_completion_tokens_zero", "POST", C, chat(R"("max_completion_tokens":0)"), 400, "max_completion_tokens"},
      {"context_length_exceeded", "POST", C, chat(R"("max_tokens":100000)"), 400, ""},
      {"n_zero", "POST", C, chat(R"("n":0)"), 400, "n"},
      {"n_huge", "POST", C, chat(R"("n":100000)"), 400, "n"},
      {"seed_string", "POST", C, chat(R"("seed":"x")"), 400, "seed"},
      {"stop_number", "POST", C, chat(R"("stop":5)"), 400, "stop"},
      {"stop_list_numbers", "POST", C, chat(R"("stop":[1,2])"), 400, "stop"},
      {"stop_empty_string", "POST", C, chat(R"("stop":[""])"), 400, "stop"},
      {"stop_token_ids_strings", "POST", C, chat(R"("stop_token_ids":["a"])"), 400, "stop_token_ids"},
      {"stop_token_ids_negative", "POST", C, chat(R"("stop_token_ids":[-1])"), 400, "stop_token_ids"},
      {"stop_token_ids_out_of_vocab", "POST", C, chat(R"("stop_token_ids":[99999999])"), 400, "stop_token_ids"},
      {"logprobs_string", "POST", C, chat(R"("logprobs":"yes")"), 400, "logprobs"},
      {"top_logprobs_without_logprobs", "POST", C, chat(R"("top_logprobs":3)"), 400, "top_logprobs"},
      {"top_logprobs_too_many", "POST", C, chat(R"("logprobs":true,"top_logprobs":50)"), 400, "top_logprobs"},
      {"stream_string", "POST", C, chat(R"("stream":"yes")"), 400, "stream"},
      {"stream_options_without_stream", "POST", C, chat(R"("stream_options":{"include_usage":true})"), 400, "stream_options"},
      {"stream_options_not_object", "POST", C, chat(R"("stream":true,"stream_options":3)"), 400, "stream_options"},
      {"ignore_eos_string", "POST", C, chat(R"("ignore_eos":"no")"), 400, "ignore_eos"},
      {"sink_router_string", "POST", C, chat(R"("sink_router":"on")"), 400, "sink_router"},
      {"vlm_options_sink_router_string", "POST", C, chat(R"("vlm_options":{"sink_router":1})"), 400, "vlm_options.sink_router"},
      {"vlm_options_look_m_bad_mode", "POST", C, chat(R"("vlm_options":{"look_m":"squeeze"})"), 400, "vlm_options.look_m"},
      {"vlm_options_not_object", "POST", C, chat(R"("vlm_options":[1])"), 400, "vlm_options"},
      {"unknown_model", "POST", C, R"({"model":"gpt-9","messages":[{"role":"user","content":"hi"}]})", 404, "model"},
      {"model_not_string", "POST", C, R"({"model":3,"messages":[{"role":"user","content":"hi"}]})", 400, "model"},
      {"chat_template_kwargs_list", "POST", C, chat(R"("chat_template_kwargs":[1])"), 400, "chat_template_kwargs"},
      {"continue_and_generation_prompt", "POST", C, chat(R"("continue_final_message":true)"), 400, "continue_final_message"},
      {"wrong_content_type", "POST", C, chat(""), 415, "", {"Content-Type: text/plain"}},
      {"no_content_type", "POST", C, chat(""), 415, "", {}},
      {"prompt_missing", "POST", P, R"({"model":"demo"})", 400, "prompt"},
      {"prompt_number", "POST", P, R"({"prompt":5})", 400, "prompt"},
      {"prompt_empty_string", "POST", P, R"({"prompt":""})", 400, "prompt"},
      {"prompt_empty_list", "POST", P, R"({"prompt":[]})", 400, "prompt"},
      {"prompt_negative_ids", "POST", P, R"({"prompt":[1,-2,3]})", 400, "prompt"},
      {"prompt_ids_out_of_vocab", "POST", P, R"({"prompt":[1,99999999]})", 400, ""},
      {"prompt_mixed_list", "POST", P, R"({"prompt":["a",3]})", 400, "prompt"},
      {"prompt_too_long", "POST", P, R"({"prompt":)" + json(std::vector<int>(3000, 100)).dump() + "}", 400, ""},
      {"completion_logprobs_bool", "POST", P, comp(R"("logprobs":true)"), 400, "logprobs"},
      {"completion_logprobs_big", "POST", P, comp(R"("logprobs":99)"), 400, "logprobs"},
      {"completion_suffix", "POST", P, comp(R"("suffix":"x")"), 400, "suffix"},
      {"echo_string", "POST", P, comp(R"("echo":"y")"), 400, "echo"},
      {"tokenize_no_prompt", "POST", "/tokenize", "{}", 400, "prompt"},
      {"tokenize_not_json", "POST", "/tokenize", "xx", 400, ""},
      {"detokenize_bad_tokens", "POST", "/detokenize", R"({"tokens":"abc"})", 400, "tokens"},
      {"detokenize_out_of_vocab", "POST", "/detokenize", R"({"tokens":[99999999]})", 400, "tokens"},
      {"unknown_route", "GET", "/v1/engines", "", 404, ""},
      {"get_on_post_route", "GET", C, "", 405, ""},
      {"post_on_get_route", "POST", "/v1/models", "{}", 405, ""},
      {"huge_body", "POST", C, std::string(40u << 20, 'x'), 413, ""},
  };
  return t;
}

class BadRequests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(std::string(VLM_BIN_DIR) + "/vlm-server",
                                {"--model", demo_model_dir(), "--served-model-name", "demo", "--max-model-len", "2048",
                                 "--num-kv-blocks", "512", "--log-level", "error"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* BadRequests::server_ = nullptr;

TEST_F(BadRequests, EachGetsTheRightStatusAndErrorShape) {
  const auto table = cases();
  ASSERT_GE(table.size(), 60u);
  for (const auto& c : table) {
    SCOPED_TRACE(c.name);
    HttpResult r = http_request(c.method, server_->base_url() + c.path, c.body, c.headers, 20000);
    EXPECT_EQ(r.status, c.status) << r.body.substr(0, 300);
    if (r.status == 413) continue;  // answered before the body is read
    json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "error body is not JSON: " << r.body.substr(0, 200);
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_TRUE(j["error"].contains("code"));
    if (!c.param.empty()) EXPECT_EQ(j["error"]["param"], c.param) << r.body;
  }
  EXPECT_EQ(http_request("GET", server_->base_url() + "/health").status, 200) << "server must stay healthy";
}

TEST_F(BadRequests, AuthAndSlowClients) {
  ServerProcess keyed(std::string(VLM_BIN_DIR) + "/vlm-server",
                      {"--model", demo_model_dir(), "--served-model-name", "demo", "--api-key", "sekret", "--max-model-len", "512", "--num-kv-blocks", "64"});
  HttpResult r = http_request("POST", keyed.base_url() + "/v1/completions", comp(R"("max_tokens":2)"));
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "authentication_error");
  r = http_request("POST", keyed.base_url() + "/v1/completions", comp(R"("max_tokens":2)"),
                   {"Content-Type: application/json", "Authorization: Bearer wrong"});
  EXPECT_EQ(r.status, 401);
  r = http_request("POST", keyed.base_url() + "/v1/completions", comp(R"("max_tokens":2)"),
                   {"Content-Type: application/json", "Authorization: Bearer sekret"});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(http_request("GET", keyed.base_url() + "/v1/models").status, 401);

  // Slowloris: connections that send half a request and stall are dropped; the server answers others.
  namespace asio = boost::asio;
  asio::io_context io;
  std::vector<asio::ip::tcp::socket> slow;
  for (int i = 0; i < 20; ++i) {
    slow.emplace_back(io);
    slow.back().connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server_->port())});
    asio::write(slow.back(), asio::buffer(std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Len")));
  }
  EXPECT_EQ(http_request("GET", server_->base_url() + "/health").status, 200);
}

}  // namespace
}  // namespace vlm::testing
