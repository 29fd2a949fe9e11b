// A small HTTP/1.1 server for tests that need a real peer on 127.0.0.1 (media fetching, load
// clients). Routes are exact paths; each handler returns status, content type, body and extra
// headers, and may sleep. Runs one thread; serves connections one at a time; stops (and joins)
// in the destructor.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace vlm::testing {

struct TestResponse {
  int status = 200;
  std::string content_type = "application/octet-stream";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  int delay_ms = 0;  // sleep before answering
  // > 0: send the headers without Content-Length (the body ends when the connection closes),
  // then the body one byte every trickle_ms, stopping early when the client goes away.
  int trickle_ms = 0;
};

class TestHttpServer {
 public:
  using Handler = std::function<TestResponse(const std::string& target)>;
  // Binds 127.0.0.1 on an ephemeral port. Unknown paths answer 404.
  explicit TestHttpServer(std::map<std::string, Handler> routes);
  ~TestHttpServer();
  int port() const { return port_; }
  std::string url(const std::string& path) const;
  int requests_served() const { return served_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<int> served_{0};
  std::thread thread_;
};

}  // namespace vlm::testing
