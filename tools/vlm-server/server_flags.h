// vlm-server's flags (the table is in server_flags.cpp; `vlm-server --help` prints it) and the
// option structs made from them. A value comes from the command line, else the environment
// (VLM_SERVER_<NAME>: upper case, '-' -> '_'), else the --config JSON object (same names, dashes or
// underscores). A bad value, an unknown name or a missing --model is a usage error: the error, the
// synopsis and the table on stderr, exit status 2 (cli::FlagParser::fail).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/engine_config.h"
#include "model/media/video_decode.h"
#include "server/api_server.h"
#include "server/http/http_server.h"
#include "tools/common/cli_flags.h"

namespace vlm::server_cli {

class ServerFlags {
 public:
  // Parses argv (vLLM's bare switches --[no-]enable-prefix-caching, --enforce-eager and llama.cpp's
  // bare --no-webui included), then the environment, then --config; --model is required.
  static ServerFlags parse(int argc, char** argv);

  bool has(const std::string& name) const { return flags_.count(name) != 0; }
  const std::string& str(const std::string& name) const { return flags_.at(name); }  // has(name) required
  std::string str(const std::string& name, const std::string& fallback) const;
  // The flag as an integer >= min (else a usage error), fallback when absent.
  int64_t integer(const std::string& name, int64_t fallback, int64_t min) const;
  // The flag as a finite number > 0 (else a usage error), fallback when absent.
  double positive(const std::string& name, double fallback) const;
  // 1/true/on or 0/false/off (else a usage error), fallback when absent.
  bool boolean(const std::string& name, bool fallback) const;
  [[noreturn]] void usage(const std::string& error) const;

  const std::map<std::string, std::string>& all() const { return flags_; }
  static const cli::FlagParser& parser();

 private:
  std::map<std::string, std::string> flags_;
};

// What the model families' media loaders take from the flags beside ApiServerOptions.
struct MediaFlags {
  int max_video_frames = 32;
  int64_t video_total_pixels = 90316800;  // qwen-vl-utils' VIDEO_TOTAL_PIXELS
  VideoLimits video_limits;
  bool gpu_preprocess = true;  // --gpu-media-preprocess (served_model.cpp applies it where the CUDA backend encodes)
};

// Media limits, the API key, the chat content format: everything ApiServer takes except the model's media.
ApiServerOptions api_options(const ServerFlags& f);
MediaFlags media_flags(const ServerFlags& f, const ApiServerOptions& api);
HttpServerOptions http_options(const ServerFlags& f);
// The KV cache, the scheduler (checked by scheduler_config_error), the backend flags (--device, --dtype,
// tensor parallel, ...: tools/common/backend_flags.h), LOOK-M, SinkRouter and sparse prefill.
EngineConfig engine_config(const ServerFlags& f);
// --failure-exit-delay in seconds, [0, 86400] (default 2).
double failure_exit_delay(const ServerFlags& f);
// "a, b,c" -> {"a", "b", "c"}: blanks dropped, empty items skipped.
std::vector<std::string> split_commas(const std::string& s);

}  // namespace vlm::server_cli
