#include "tests/support/server_process.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace vlm::testing {

ServerProcess::ServerProcess(const std::string& binary, std::vector<std::string> args, double ready_timeout_s) {
  static std::atomic<int> counter{0};
  log_path_ = std::filesystem::temp_directory_path() /
              ("vlm_server_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".log");
  args.insert(args.end(), {"--host", "127.0.0.1", "--port", "0"});
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  const int rc = posix_spawn(&pid_, binary.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + binary);
  const std::regex ready(R"(ready: http://127\.0\.0\.1:(\d+))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(ready_timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    const std::string text = log();
    if (std::regex_search(text, m, ready)) {
      port_ = std::stoi(m[1]);
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("server exited before it was ready:\n" + text);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string text = log();
  terminate(1);
  throw std::runtime_error("server not ready in time:\n" + text);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) terminate(10);
  std::error_code ec;
  std::filesystem::remove(log_path_, ec);
}

std::string ServerProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ServerProcess::terminate(double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

std::string demo_model_dir() {
  static std::once_flag once;
  static std::string dir;
  std::call_once(once, [] {
    dir = (std::filesystem::temp_directory_path() / ("vlm_demo_model_" + std::to_string(::getpid()))).string();
    const std::string cmd = std::string(VLM_BIN_DIR) + "/vlm-random-model --preset tiny-qwen2 --std 0.3 --seed 1 --out " +
                            dir + " --tokenizer-from " + VLM_FIXTURES_DIR + "/../data/tokenizers/qwen3 > /dev/null";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("cannot build the demo model: " + cmd);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
  });
  return dir;
}

namespace {
size_t append(char* p, size_t s, size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(p, s * n);
  return s * n;
}
}  // namespace

HttpResult http_request(const std::string& method, const std::string& url, const std::string& body,
                        std::vector<std::string> headers, long timeout_ms) {
  HttpResult r;
  CURL* c = curl_easy_init();
  curl_slist* h = nullptr;
  for (const auto& x : headers) h = curl_slist_append(h, x.c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "POST") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, append);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r.headers);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return r;
}

}  // namespace vlm::testing
