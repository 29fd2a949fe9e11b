// Fault cases of the hardening issue not covered elsewhere (docs/RELIABILITY.md lists them all):
//  - local media paths: symlinks and sibling directories cannot escape the allowed root;
//  - media fetches from local servers that trickle, send an oversized body with no length,
//    redirect in a loop, or sit behind a host name that resolves to an internal address (the
//    address check runs on the address curl connects to, so a second lookup cannot slip past);
//  - KV-cache exhaustion under concurrent load: preemption or 429, never a crash, every block
//    back afterwards;
//  - SIGTERM under load: accepted streams finish, a request on an open connection gets 503, new
//    connections are refused, exit 0; a restarted server on the same model is healthy.
// Every wait is bounded in count; every process and thread started here is stopped here.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/check.h"
#include "server/media/media_fetch.h"
#include "tests/support/server_process.h"
#include "tests/support/test_http_server.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

std::string fetch_error(const std::string& url, const MediaFetchOptions& o) {
  try {
    fetch_media(url, o);
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "(no error)";
}

class MediaFetchFaults : public ::testing::Test {
 protected:
  TestHttpServer server{{
      // 200 bytes, one every 20 ms: 4 s in all, far past the 300 ms limit used below.
      {"/trickle", [](const std::string&) { return TestResponse{200, "image/png", std::string(200, 'x'), {}, 0, 20}; }},
      // No Content-Length, so only the byte count while reading can stop it.
      {"/unsized", [](const std::string&) { return TestResponse{200, "image/png", std::string(3000, 'x'), {}, 0, 1}; }},
      {"/loop", [this](const std::string&) { return TestResponse{302, "text/plain", "", {{"Location", server.url("/loop")}}}; }},
      {"/img", [](const std::string&) { return TestResponse{200, "image/jpeg", "JPEGBYTES"}; }},
  }};
  MediaFetchOptions allowed() {
    MediaFetchOptions o;
    o.allowed_domains = {"127.0.0.1"};
    return o;
  }
};

TEST_F(MediaFetchFaults, TrickledBodyTimesOut) {
  MediaFetchOptions o = allowed();
  o.total_timeout_ms = 300;
  EXPECT_NE(fetch_error(server.url("/trickle"), o).find("timed out fetching media from '127.0.0.1'"),
            std::string::npos);
}

TEST_F(MediaFetchFaults, OversizedBodyWithoutLengthIsCutOff) {
  MediaFetchOptions o = allowed();
  o.max_bytes = 1000;
  EXPECT_NE(fetch_error(server.url("/unsized"), o).find("larger than the limit of 1000 bytes"), std::string::npos);
}

TEST_F(MediaFetchFaults, RedirectLoopStopsAtTheLimit) {
  MediaFetchOptions o = allowed();
  EXPECT_NE(fetch_error(server.url("/loop"), o).find("redirected more than 3 times"), std::string::npos);
  // The test server counts a request after its reply is written: wait (bounded) for the last.
  for (int i = 0; i < 400 && server.requests_served() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(server.requests_served(), 4) << "the first request and 3 redirects, no more";
}

TEST_F(MediaFetchFaults, HostNameResolvingToLoopbackIsRefusedAtConnect) {
  // No allowed domains: any public host may be fetched, internal addresses may not. The name
  // "localhost" passes the URL checks; its address is refused in curl's open-socket callback,
  // i.e. on the very address curl would connect to, after whatever lookup curl made. A DNS
  // answer that changes between lookups (rebinding) meets the same check on every connect.
  MediaFetchOptions o;
  const std::string err = fetch_error("http://localhost:" + std::to_string(server.port()) + "/img", o);
  EXPECT_NE(err.find("resolves to an internal address"), std::string::npos) << err;
  EXPECT_EQ(server.requests_served(), 0) << "the refused fetch must not connect";
  // A redirect from a listed host to an unlisted internal address is re-checked and refused
  // before any connection to it (every hop is a fresh fetch with the same checks).
  MediaFetchOptions listed = allowed();
  TestHttpServer hop{{{"/to_private", [](const std::string&) {
    return TestResponse{302, "text/plain", "", {{"Location", "http://10.255.255.1/x"}}};
  }}}};
  EXPECT_NE(fetch_error(hop.url("/to_private"), listed).find("'10.255.255.1' is not in the allowed media domains"),
            std::string::npos);
}

TEST(MediaFetchLocal, SymlinkOutOfTheRootIsRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("vlm_faults_" + std::to_string(::getpid()));
  fs::create_directories(dir / "root");
  std::ofstream(dir / "secret.png") << "secret";
  std::ofstream(dir / "root" / "ok.png") << "PNG";
  fs::create_symlink(dir / "secret.png", dir / "root" / "link.png");
  fs::create_directory_symlink(dir, dir / "root" / "up");
  MediaFetchOptions o;
  o.allowed_local_path = (dir / "root").string();
  EXPECT_EQ(fetch_media("file://" + (dir / "root" / "ok.png").string(), o).data, "PNG");
  EXPECT_NE(fetch_error("file://" + (dir / "root" / "link.png").string(), o).find("outside"), std::string::npos);
  EXPECT_NE(fetch_error("file://" + (dir / "root" / "up" / "secret.png").string(), o).find("outside"), std::string::npos);
  EXPECT_NE(fetch_error("file://" + (dir / "root" / "%2e%2e" / "secret.png").string(), o).find("not found"),
            std::string::npos);
  // A root given as a prefix of a sibling directory's name does not admit the sibling.
  fs::create_directories(dir / "rootx");
  std::ofstream(dir / "rootx" / "a.png") << "x";
  EXPECT_NE(fetch_error("file://" + (dir / "rootx" / "a.png").string(), o).find("outside"), std::string::npos);
  fs::remove_all(dir);
}

// --- the real server ---

std::vector<std::string> args(int kv_blocks, int max_waiting, int max_model_len = 256) {
  return {"--model", demo_model_dir(), "--served-model-name", "demo", "--kv-cache-dtype", "f32",
          "--num-kv-blocks", std::to_string(kv_blocks), "--max-model-len", std::to_string(max_model_len), "--max-waiting",
          std::to_string(max_waiting), "--threads", "2", "--log-level", "warn"};
}

// The value of an unlabelled or labelled sample `name{...} v`; -1 when absent.
double metric(const std::string& text, const std::string& name) {
  size_t at = text.find("\n" + name + "{");
  if (at == std::string::npos) at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  const size_t sp = text.find(' ', text.find_first_of("} ", at + 1 + name.size()));
  return std::stod(text.substr(sp + 1, text.find('\n', sp) - sp - 1));
}

// A blocking client socket to 127.0.0.1:port (receive timeout 60 s so a bug cannot hang ctest).
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends one request on fd and reads one reply (Content-Length framed); returns its status line
// and body, "" when the peer closed first.
std::string exchange(int fd, const std::string& method, const std::string& path, const std::string& body) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                    "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return "";
  std::string in;
  char buf[4096];
  for (int i = 0; i < 1000; ++i) {
    const size_t head = in.find("\r\n\r\n");
    if (head != std::string::npos) {
      const size_t cl = in.find("Content-Length: ");
      const size_t len = cl == std::string::npos ? 0 : std::stoul(in.substr(cl + 16));
      if (in.size() >= head + 4 + len) return in;
    }
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return in;
    in.append(buf, static_cast<size_t>(n));
  }
  return in;
}

TEST(ServerFaults, KvExhaustionPreemptsOrRefusesAndFreesEveryBlock) {
  // 16 blocks of 16 tokens: two of the eight 100-token requests fit at once, so decoding runs
  // out of blocks (preemption) and the waiting queue of 3 overflows (429).
  std::vector<std::string> a = args(16, 3);
  a.insert(a.end(), {"--max-body-bytes", "65536"});  // a limit flag taking effect (docs/RELIABILITY.md)
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server", a);
  constexpr int kN = 8;
  std::vector<HttpResult> results(kN);
  std::vector<std::thread> clients;
  for (int i = 0; i < kN; ++i)
    clients.emplace_back([&, i] {
      results[i] = http_request("POST", server.base_url() + "/v1/completions",
                                json{{"prompt", "Count " + std::to_string(i)}, {"max_tokens", 100},
                                     {"ignore_eos", true}}.dump());
    });
  for (auto& t : clients) t.join();
  int ok = 0, refused = 0;
  for (int i = 0; i < kN; ++i) {
    if (results[i].status == 429) {
      ++refused;
      EXPECT_NE(results[i].body.find("rate_limit_exceeded"), std::string::npos) << results[i].body;
      continue;
    }
    ASSERT_EQ(results[i].status, 200) << i << ": " << results[i].body << "\n" << server.log();
    EXPECT_EQ(json::parse(results[i].body)["usage"]["completion_tokens"], 100) << i;
    ++ok;
  }
  // A path that is not UTF-8 is a 404 in the error envelope (it used to throw from the JSON
  // serializer on the I/O thread and end the process; fuzz/regressions/http_request).
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  const std::string r404 = exchange(fd, "GET", "/v1/\xe3\xff", "");
  close(fd);
  EXPECT_EQ(r404.rfind("HTTP/1.1 404", 0), 0u) << r404;
  EXPECT_NE(r404.find("no route for GET /v1/\xef\xbf\xbd"), std::string::npos) << r404;

  EXPECT_EQ(http_request("POST", server.base_url() + "/v1/completions", std::string(70000, ' ')).status, 413);

  // The engine publishes its gauges after each step, a moment after the last reply went out:
  // wait (bounded) for the snapshot with nothing running or waiting, then read it.
  std::string m;
  for (int i = 0; i < 400; ++i) {
    m = http_request("GET", server.base_url() + "/metrics").body;
    if (metric(m, "vllm:num_requests_running") == 0 && metric(m, "vllm:num_requests_waiting") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(metric(m, "vllm:num_preemptions_total") + refused, 0) << m;
  EXPECT_EQ(metric(m, "vllm:kv_cache_usage_perc"), 0) << m;
  EXPECT_EQ(metric(m, "vllm:num_requests_running"), 0) << m;
  EXPECT_EQ(http_request("GET", server.base_url() + "/health").status, 200);
  EXPECT_EQ(server.terminate(30), 0) << server.log();
}

TEST(ServerFaults, SigtermUnderLoadDrainsRefusesThenRestartsHealthy) {
  // Streams long enough (600 tokens) to still be running when the late request comes.
  // The drain limit and the clients' timeout leave room for a slow machine (an ASan build on two
  // busy cores decodes these 4 x 600 tokens in well over the default 30 s): what is tested is that
  // accepted streams finish, not how fast.
  std::vector<std::string> drain_args = args(512, 64, 1024);
  drain_args.insert(drain_args.end(), {"--drain-timeout", "150"});
  auto server = std::make_unique<ServerProcess>(std::string(VLM_BIN_DIR) + "/vlm-server", drain_args);
  // A keep-alive connection opened (and served once) before the signal.
  const int kept = connect_to(server->port());
  ASSERT_GE(kept, 0);
  ASSERT_EQ(exchange(kept, "GET", "/health", "").rfind("HTTP/1.1 200", 0), 0u);

  constexpr int kN = 4;
  std::vector<HttpResult> results(kN);
  std::vector<std::thread> clients;
  for (int i = 0; i < kN; ++i)
    clients.emplace_back([&, i] {
      results[i] = http_request("POST", server->base_url() + "/v1/completions",
                                json{{"prompt", "Go on " + std::to_string(i)}, {"max_tokens", 600},
                                     {"ignore_eos", true}, {"stream", true}}.dump(),
                                {"Content-Type: application/json"}, 170000);
    });
  // Signal only once every stream is in the engine (running or waiting): a client thread that a
  // busy machine had not yet scheduled would otherwise find the listener closed, which is the
  // behaviour under test for new connections, not a failure of the drain (CI saw it on 2 cores).
  for (int i = 0; i < 4000; ++i) {
    const std::string m = http_request("GET", server->base_url() + "/metrics").body;
    if (metric(m, "vllm:num_requests_running") + metric(m, "vllm:num_requests_waiting") >= kN) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(server->pid(), SIGTERM);
  // The listener closes right after the server starts draining: wait (bounded) for a new
  // connection to be refused.
  bool refused = false;
  for (int i = 0; i < 2000 && !refused; ++i) {
    const int fd = connect_to(server->port());
    if (fd < 0) refused = true;
    else close(fd);
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(refused) << "new connections must be refused while draining";
  const std::string late = exchange(kept, "POST", "/v1/completions", json{{"prompt", "late"}, {"max_tokens", 4}}.dump());
  close(kept);
  EXPECT_EQ(late.rfind("HTTP/1.1 503", 0), 0u) << late;
  EXPECT_NE(late.find("server is shutting down"), std::string::npos) << late;
  for (auto& t : clients) t.join();
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(results[i].status, 200) << i;
    EXPECT_NE(results[i].body.find("data: [DONE]"), std::string::npos) << i << ": the accepted stream must finish";
  }
  EXPECT_EQ(server->terminate(160), 0) << server->log();
  server.reset();

  // Restart on the same model: healthy and serving.
  ServerProcess again(std::string(VLM_BIN_DIR) + "/vlm-server", args(512, 64));
  EXPECT_EQ(http_request("GET", again.base_url() + "/health").status, 200);
  HttpResult r = http_request("POST", again.base_url() + "/v1/completions",
                              json{{"prompt", "Hello"}, {"max_tokens", 5}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["completion_tokens"], 5);
  EXPECT_EQ(again.terminate(30), 0) << again.log();
}

}  // namespace
}  // namespace vlm::testing
