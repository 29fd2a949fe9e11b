// BenchOptions: every flag of vlm-bench, parsed and checked. The flag names follow
// `vllm bench serve` where one exists (shared/SERVING.md d.1).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace vlm::bench {

// A bad command line: main prints the message and the usage, and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BenchOptions {
  // Target.
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "chat";  // "chat" (/v1/chat/completions) or "completions" (/v1/completions)
  std::string model;              // empty: the first id of GET /v1/models
  std::string api_key;            // empty: $OPENAI_API_KEY if set, else no Authorization header
  bool allow_remote = false;      // without it, only loopback hosts are accepted
  bool stream = true;

  // Workload.
  std::string dataset = "random";  // random | random-mm | jsonl | multi-turn
  std::string dataset_path;        // jsonl only
  int num_prompts = 1000;
  int warmup = 0;                  // requests sent before the measured run, not counted
  int input_len = 1024;            // tokens (random, random-mm)
  int output_len = 128;            // tokens asked for (with ignore_eos unless --no-ignore-eos)
  bool ignore_eos = true;          // --ignore-eos (default, as vLLM bench's flag) / --no-ignore-eos
  std::string tokenizer_dir;       // --tokenizer DIR: count prompt tokens with this HF tokenizer
  double range_ratio = 0.0;        // lengths uniform in [len*(1-r), len*(1+r)]
  bool prompt_ids = false;         // completions only: send prompts as token-id lists
  int images_per_request = 1;      // random-mm
  int image_width = 512, image_height = 512;
  std::vector<std::string> image_files;  // --image-file (repeatable): sent instead of generated images
  int video_frames = 0;            // random-mm: frames sent as consecutive image parts
  bool video_part = false;         // --video-part: the frames as one video_url part (a frame list)
  int num_turns = 3;               // multi-turn: turns per conversation (num_prompts conversations)
  int turn_len = 64;               // multi-turn: tokens of each user turn after the first
  unsigned long long seed = 0;

  // Arrivals.
  double request_rate = 0.0;  // requests/s; 0 means inf (everything at t=0)
  double burstiness = 1.0;    // gamma shape; 1 = Poisson
  int max_concurrency = 0;    // 0: unlimited

  // Limits (seconds).
  double timeout_s = 600.0;          // the whole run, warmup included
  double request_timeout_s = 300.0;  // one request

  // Metrics and output.
  std::vector<double> percentiles{50, 90, 99};
  std::optional<double> goodput_ttft_ms, goodput_tpot_ms, goodput_e2el_ms;
  std::string result_json;
  std::string plot_svg;
  bool progress = false;  // forced on; otherwise only when stderr is a TTY
  bool no_progress = false;

  std::string url(const std::string& path) const;  // base_url without a trailing '/' + path
  std::string api_path() const;                     // "/v1/chat/completions" or "/v1/completions"
};

// Parses argv (argv[0] skipped). Throws UsageError naming the flag and the bad value.
BenchOptions parse_bench_options(int argc, const char* const* argv);

// The usage text printed with --help and after a UsageError.
std::string bench_usage();

// True when `base_url`'s host is a loopback name or address (localhost, 127.0.0.0/8, ::1).
// Throws UsageError when the URL cannot be parsed or is not http(s).
bool is_loopback_url(const std::string& base_url);

}  // namespace vlm::bench
