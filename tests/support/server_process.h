// Starts a real vlm-server (or any binary) as a child process for tests: loopback only, an
// ephemeral port read from its "ready: http://HOST:PORT" line, stopped by process id
// (SIGTERM, then SIGKILL after a grace period) in the destructor.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace vlm::testing {

class ServerProcess {
 public:
  // Runs `binary args... --host 127.0.0.1 --port 0` with stderr to a log file (a vlm-server gets
  // `--dtype float32`, the exact path, unless args choose a dtype); waits up to
  // `ready_timeout_s` for the line "WORD: http://127.0.0.1:PORT" (vlm-server writes "loading: ..."
  // once its port answers 503 during the load, "ready: ..." once it serves). Throws
  // std::runtime_error (with the log) on failure.
  ServerProcess(const std::string& binary, std::vector<std::string> args, double ready_timeout_s = 60,
                const std::string& ready_word = "ready");
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const;  // what the server wrote to stderr so far
  // The value of a metric's first sample on GET /metrics (`name{...} v` or `name v`); -1 when the
  // exposition has no sample of it yet.
  double metric(const std::string& name) const;
  // Sends SIGTERM and waits up to timeout_s; returns the exit status (or -1 on timeout/signal).
  int terminate(double timeout_s = 30);
  // Waits up to timeout_s for the process to exit by itself (no signal); returns its exit status,
  // or -1 when it did not exit in time (it is then still running) or ended by a signal.
  int wait_exit(double timeout_s);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

// The path of a built executable: beside the running binary when it is there (a GPU bundle's bin/,
// or build/bin), else in the build's VLM_BIN_DIR.
std::string vlm_binary(const std::string& name);

// A demo model directory: vlm-random-model --preset tiny-qwen2 with the Qwen3 tokenizer from
// tests/data (fetched by scripts/fetch_test_data.sh). Created once per process under /tmp.
std::string demo_model_dir();

// A servable LLaVA directory from tests/fixtures/llava/llava_small (random weights): its config and
// weights, the pad-to-square preprocessor the fixture used, the Llama-2 tokenizer with <image>
// and <pad> added as the fixture's processor did, and a chat template rendering "ROLE: parts".
// Created once per process under /tmp.
const std::string& llava_model_dir();

// Runs `cmd` through the shell to completion (popen) and returns its exit status (-1: it did not
// exit normally) and its stdout (add " 2>&1" to the command for stderr too).
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult run_command(const std::string& cmd);

// Minimal HTTP client over libcurl for tests.
struct HttpResult {
  long status = 0;
  std::string body;
  std::string headers;
};
HttpResult http_request(const std::string& method, const std::string& url, const std::string& body = "",
                        std::vector<std::string> headers = {"Content-Type: application/json"}, long timeout_ms = 60000);

}  // namespace vlm::testing
