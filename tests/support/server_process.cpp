#include "tests/support/server_process.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <mutex>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace vlm::testing {

namespace fs = std::filesystem;

std::string vlm_binary(const std::string& name) {
  std::error_code ec;
  const fs::path beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / name;
  if (!ec && ::access(beside.c_str(), X_OK) == 0) return beside.string();
  return std::string(VLM_BIN_DIR) + "/" + name;
}

ServerProcess::ServerProcess(const std::string& binary, std::vector<std::string> args, double ready_timeout_s,
                             const std::string& ready_word) {
  static std::atomic<int> counter{0};
  log_path_ = std::filesystem::temp_directory_path() /
              ("vlm_server_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".log");
  args.insert(args.end(), {"--host", "127.0.0.1", "--port", "0"});
  // Tests check the exact path (Hugging Face parity) unless they ask for another dtype.
  const bool is_server = fs::path(binary).filename() == "vlm-server";
  if (is_server && std::find(args.begin(), args.end(), "--dtype") == args.end() &&
      std::find(args.begin(), args.end(), "--gemm-activations") == args.end())
    args.insert(args.end(), {"--dtype", "float32"});
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
  const std::regex ready(ready_word + R"(: http://127\.0\.0\.1:(\d+))");
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

int ServerProcess::wait_exit(double timeout_s) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

int ServerProcess::terminate(double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const int code = wait_exit(timeout_s);
  if (pid_ <= 0) return code;  // exited within the timeout
  kill(pid_, SIGKILL);
  int status = 0;
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
std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

// "USER: " + parts (text verbatim, an image as "<image>\n") + " " per message, then "ASSISTANT:".
const char* kChatTemplate =
    "{{ bos_token }}{% for message in messages %}{{ message['role'] | upper }}: "
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ '<image>\\n' }}"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %} {% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}";

// The servable model directory, built once per process under /tmp.
const std::string& llava_model_dir() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("vlm_llava_model_" + std::to_string(::getpid()));
    fs::create_directories(d);
    for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
      fs::copy_file(std::string(VLM_FIXTURES_DIR) + "/llava" + "/llava_small/" + f, d / f, fs::copy_options::overwrite_existing);
    // llava_small's prompts went through the pad-to-square LlavaImageProcessor (summary.json).
    fs::copy_file(std::string(VLM_FIXTURES_DIR) + "/llava" + "/processors/clip56_pad/preprocessor_config.json", d / "preprocessor_config.json",
                  fs::copy_options::overwrite_existing);
    const std::string tok_dir = std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/llama2";
    nlohmann::json tok = nlohmann::json::parse(read_text_file(tok_dir + "/tokenizer.json"));
    // As tools/fixtures/make_llava_fixtures.py: add_tokens(<image>, special) and pad_token <pad>.
    for (auto [id, content] : {std::pair{32000, "<image>"}, std::pair{32001, "<pad>"}})
      tok["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                                     {"rstrip", false}, {"normalized", false}, {"special", true}});
    std::ofstream(d / "tokenizer.json") << tok.dump();
    fs::copy_file(tok_dir + "/tokenizer_config.json", d / "tokenizer_config.json", fs::copy_options::overwrite_existing);
    std::ofstream(d / "chat_template.jinja") << kChatTemplate;
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(fs::temp_directory_path() / ("vlm_llava_model_" + std::to_string(::getpid())), ec);
    });
    return d.string();
  }();
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

CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

double ServerProcess::metric(const std::string& name) const {
  std::istringstream lines(http_request("GET", base_url() + "/metrics").body);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with(name + "{") || line.starts_with(name + " ")) return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

}  // namespace vlm::testing
