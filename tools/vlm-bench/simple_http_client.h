// SimpleHttpClient: blocking GET/POST over one reused libcurl handle, for the few calls made
// before a run (GET /v1/models, POST /tokenize). Not thread-safe.
#pragma once

#include <string>

#include <curl/curl.h>

namespace vlm::bench {

struct HttpResult {
  int status = 0;           // 0: no response; see error
  std::string body;
  std::string error;        // libcurl's message when status is 0
};

class SimpleHttpClient {
 public:
  // api_key: sent as "Authorization: Bearer KEY" when non-empty. timeout_s: per call.
  SimpleHttpClient(std::string api_key, double timeout_s);
  ~SimpleHttpClient();
  SimpleHttpClient(const SimpleHttpClient&) = delete;
  SimpleHttpClient& operator=(const SimpleHttpClient&) = delete;

  HttpResult get(const std::string& url);
  HttpResult post_json(const std::string& url, const std::string& body);

 private:
  HttpResult perform(const std::string& url, const std::string* body);
  CURL* easy_;
  std::string api_key_;
  double timeout_s_;
};

}  // namespace vlm::bench
