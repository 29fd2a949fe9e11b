// vlm-calibrate-sink: fits SinkRouter's length-dependent threshold tau(L) for one model
// (paper §4.2, Appendix A) and reports how well the cosine proxy predicts the oracle
// first-token attention mass (Appendix C).
//   vlm-calibrate-sink --model DIR --prompts FILE [--target-skip 0.6] [--out FILE]
//                      [--lengths 1024,2048,...] [--layers-skip 2] [--decode-steps 8]
//                      [--aggregation min|mean|max] [--surrogate zero|anchor_value]
//                      [--oracle-mass 0.5] [--prompt-format text|ids] [--kv-cache-dtype bf16]
//                      [--block-size 16] [--prefill-chunk 512] [--threads N] [--device cpu|cuda]
// --device cuda: the forward passes, group scores and oracle first-token masses run on the GPU
// (weights, activations and cache in --kv-cache-dtype; f32 is the exact path).
// --prompts: one prompt per non-empty line, text (tokenized with DIR/tokenizer.json) or, with
// --prompt-format ids, token ids separated by spaces. Each prompt is cut or repeated to every
// length (its first token kept once as the sink anchor), prefilled and decoded greedily for
// --decode-steps tokens on the exact path; every (token, routed layer, kv group) is a sample.
// --out (default configs/<basename of DIR>/sink_router.json) is what vlm-server
// --sink-router-config reads (model/methods/sink_router_config_file.h), with the report under
// "calibration". Default lengths: powers of two from 256 up to min(32768, the model's
// max_position_embeddings - decode steps), at most the 5 longest.
// Exit status: 0 written, 2 bad arguments or inputs, 1 a model or file that cannot be loaded.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"
#include "model/decoder/llm_decoder.h"
#include "model/methods/sink_router_config_file.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/common/cli_flags.h"
#include "tools/common/language_model.h"
#include "tools/vlm-calibrate-sink/calibration_run.h"
#include "tools/vlm-calibrate-sink/sink_calibration.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // the file keeps the order written here

const std::map<std::string, std::string> kFlags = {
    {"model", "checkpoint directory (required)"},
    {"prompts", "file of prompts, one per line (required)"},
    {"target-skip", "skip ratio to calibrate for, in [0, 1] (default 0.6)"},
    {"out", "config file to write (default configs/<model>/sink_router.json)"},
    {"lengths", "comma-separated context lengths (default: powers of two up to the model's limit)"},
    {"layers-skip", "first layers never routed (default 2, the paper's)"},
    {"decode-steps", "greedy decode tokens per prompt and length (default 8)"},
    {"aggregation", "group score and mass aggregation: min (default), mean, max"},
    {"surrogate", "written to the config: zero (default) or anchor_value"},
    {"oracle-mass", "oracle sink label: group first-token mass >= this (default 0.5)"},
    {"prompt-format", "text (default; needs DIR/tokenizer.json) or ids"},
    {"kv-cache-dtype", "f32, bf16 (default, the server's) or f16"},
    {"block-size", "KV block size (default 16)"},
    {"prefill-chunk", "prefill chunk in tokens (default 512)"},
    {"threads", "compute threads (default: all cores)"},
    {"device", "cpu (default) or cuda: record on the GPU decoder (dtype: --kv-cache-dtype)"},
};

const vlm::cli::FlagParser kCli("vlm-calibrate-sink --model DIR --prompts FILE [flags]", kFlags);

[[noreturn]] void usage(const std::string& error) { kCli.fail(error); }

[[noreturn]] void bad_input(const std::string& error) {
  std::fprintf(stderr, "error: %s\n", error.c_str());
  std::exit(2);
}

std::map<std::string, std::string> parse_flags(int argc, char** argv) {
  std::map<std::string, std::string> f = kCli.parse(argc, argv, /*last_wins=*/false);
  for (const char* req : {"model", "prompts"})
    if (!f.count(req)) usage(std::string("--") + req + " is required");
  return f;
}

int64_t parse_int(const std::string& flag, const std::string& s, int64_t min) { return kCli.integer(flag, s, min); }

double parse_unit(const std::string& flag, const std::string& s) { return kCli.number(flag, s, 0.0, 1.0); }

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) bad_input("cannot open --prompts " + path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  }
  if (lines.empty()) bad_input("--prompts " + path + " has no prompts (one per non-empty line)");
  return lines;
}

std::vector<std::vector<int32_t>> load_prompts(const std::string& path, const std::string& format,
                                               const std::string& model_dir, int64_t vocab) {
  const std::vector<std::string> lines = read_lines(path);
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<vlm::Tokenizer> tok;
  if (format == "text") {
    if (!std::ifstream(model_dir + "/tokenizer.json"))
      bad_input(model_dir + " has no tokenizer.json: give token ids with --prompt-format ids");
    tok = vlm::Tokenizer::load(model_dir);
  } else if (format != "ids") {
    usage("--prompt-format must be text or ids");
  }
  for (size_t n = 0; n < lines.size(); ++n) {
    std::vector<int32_t> ids;
    if (tok) {
      ids = tok->encode(lines[n]);
    } else {
      std::istringstream ss(lines[n]);
      std::string w;
      while (ss >> w) {
        char* end = nullptr;
        const long long v = std::strtoll(w.c_str(), &end, 10);
        if (*end || v < 0 || v >= vocab)
          bad_input(fmt::format("{} line {}: '{}' is not a token id in [0, {})", path, n + 1, w, vocab));
        ids.push_back(static_cast<int32_t>(v));
      }
    }
    for (int32_t id : ids)
      if (id < 0 || id >= vocab) bad_input(fmt::format("{} prompt {}: token id {} outside the vocabulary [0, {})", path, n + 1, id, vocab));
    if (ids.size() < 2)
      bad_input(fmt::format("{} prompt {} has {} token(s); a prompt needs at least 2 (a first token and text to repeat)",
                            path, n + 1, ids.size()));
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

std::vector<int> parse_lengths(const std::string& s, int64_t max_positions, int decode_steps) {
  std::vector<int> out;
  std::set<int> seen;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const int64_t v = parse_int("lengths", item, 2);
    if (v + decode_steps > max_positions)
      usage(fmt::format("--lengths: {} plus {} decode step(s) exceeds the model's max_position_embeddings ({})", v,
                        decode_steps, max_positions));
    if (!seen.insert(static_cast<int>(v)).second) usage(fmt::format("--lengths: {} given twice", v));
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) usage("--lengths needs at least one length");
  return out;
}

json reliability_json(const vlm::ProxyReliability& r) {
  return {{"samples", r.n},         {"tp", r.tp},
          {"fp", r.fp},             {"fn", r.fn},
          {"tn", r.tn},             {"precision", r.precision},
          {"recall", r.recall},     {"f1", r.f1},
          {"auprc", r.auprc},       {"oracle_rate", r.oracle_rate},
          {"mean_mass_skipped", r.mean_mass_skipped}, {"mean_mass_active", r.mean_mass_active}};
}

}  // namespace

int main(int argc, char** argv) {
  const auto f = parse_flags(argc, argv);
  return vlm::cli::run_tool([&]() -> int {
    if (f.count("threads")) vlm::set_num_threads(static_cast<int>(parse_int("threads", f.at("threads"), 1)));
    const std::string model_dir = f.at("model");
    if (!fs::is_directory(model_dir)) bad_input("--model " + model_dir + " is not a directory");
    const double target = f.count("target-skip") ? parse_unit("target-skip", f.at("target-skip")) : 0.6;
    const double oracle_mass = f.count("oracle-mass") ? parse_unit("oracle-mass", f.at("oracle-mass")) : 0.5;

    vlm::CalibrationRunOptions run;
    run.decode_steps = static_cast<int>(f.count("decode-steps") ? parse_int("decode-steps", f.at("decode-steps"), 1) : 8);
    run.block_size = static_cast<int>(f.count("block-size") ? parse_int("block-size", f.at("block-size"), 1) : 16);
    run.prefill_chunk = static_cast<int>(f.count("prefill-chunk") ? parse_int("prefill-chunk", f.at("prefill-chunk"), 1) : 512);
    run.num_dense_layers = static_cast<int>(f.count("layers-skip") ? parse_int("layers-skip", f.at("layers-skip"), 0) : 2);
    if (f.count("aggregation") && !vlm::parse_sink_aggregation(f.at("aggregation"), &run.aggregation))
      usage("--aggregation must be min, mean or max");
    vlm::SinkRouterConfig base;
    base.aggregation = run.aggregation;
    base.num_dense_layers = run.num_dense_layers;
    if (f.count("surrogate") && !vlm::parse_sink_surrogate(f.at("surrogate"), &base.surrogate))
      usage("--surrogate must be zero or anchor_value");
    if (f.count("kv-cache-dtype") && !vlm::parse_float_dtype_name(f.at("kv-cache-dtype"), &run.kv_dtype))
      usage("--kv-cache-dtype must be f32, bf16 or f16");

    // The text decoder (a vision-language checkpoint's language model, e.g. LLaVA's or Qwen3-VL's:
    // text prompts only; tools/common/language_model.h).
    const vlm::cli::LanguageModel lm = vlm::cli::load_language_model(model_dir);
    const vlm::LlmDecoder* dec = &lm.decoder();
    const vlm::ModelConfig& mc = dec->config();
    if (run.num_dense_layers >= mc.num_layers)
      usage(fmt::format("--layers-skip {}: the model has {} layers, none would be routed", run.num_dense_layers, mc.num_layers));
    const int64_t limit = mc.max_position_embeddings - run.decode_steps;
    if (f.count("lengths")) {
      run.lengths = parse_lengths(f.at("lengths"), mc.max_position_embeddings, run.decode_steps);
    } else {
      for (int64_t l = 256; l <= std::min<int64_t>(limit, 32768); l *= 2) run.lengths.push_back(static_cast<int>(l));
      if (run.lengths.empty()) usage(fmt::format("the model allows only {} positions: give --lengths", mc.max_position_embeddings));
      if (run.lengths.size() > 5) run.lengths.erase(run.lengths.begin(), run.lengths.end() - 5);
    }
    const auto prompts = load_prompts(f.at("prompts"), f.count("prompt-format") ? f.at("prompt-format") : "text",
                                      model_dir, mc.vocab_size);

    std::string out = f.count("out") ? f.at("out") : "";
    const std::string model_name = fs::path(model_dir).lexically_normal().filename().string().empty()
                                       ? fs::path(model_dir).lexically_normal().parent_path().filename().string()
                                       : fs::path(model_dir).lexically_normal().filename().string();
    if (out.empty()) out = "configs/" + model_name + "/sink_router.json";

    std::fprintf(stderr, "recording: %zu prompt(s) x %zu length(s) x %d decode step(s), layers %d..%lld routed\n",
                 prompts.size(), run.lengths.size(), run.decode_steps, run.num_dense_layers,
                 static_cast<long long>(mc.num_layers - 1));
    const std::string device = f.count("device") ? f.at("device") : "cpu";
    if (device != "cpu" && device != "cuda") usage("--device must be cpu or cuda");
    auto runner = device == "cuda" ? vlm::make_cuda_calibration_runner(*dec, run)
                                   : vlm::make_cpu_calibration_runner(*dec, run);
    const auto data = vlm::record_sink_samples(*runner, mc, prompts, run);
    vlm::CalibrationOptions co;
    co.target_skip = target;
    co.oracle_mass = oracle_mass;
    const vlm::CalibrationResult res = vlm::calibrate_sink_threshold(data, co, base);

    std::printf("SinkRouter calibration of %s: target skip %.3f, aggregation %s, layers >= %d routed\n",
                model_dir.c_str(), target, vlm::sink_aggregation_name(base.aggregation), base.num_dense_layers);
    std::printf("oracle sink = group first-token attention mass (%s over the group) >= %.3f\n",
                vlm::sink_aggregation_name(base.aggregation), oracle_mass);
    std::printf("%8s %8s %9s %7s %9s %7s %6s %6s %6s %6s %7s | %6s %6s\n", "length", "samples", "tau", "skip", "tau_fit",
                "skip", "prec", "recall", "F1", "AUPRC", "oracle", "top-P", "top-R");
    json lengths = json::array();
    for (const auto& r : res.lengths) {
      std::printf("%8lld %8lld %9.5f %7.4f %9.5f %7.4f %6.3f %6.3f %6.3f %6.3f %7.4f | %6.3f %6.3f\n",
                  static_cast<long long>(r.context_len), static_cast<long long>(r.num_samples), r.tau, r.skip_at_tau,
                  r.tau_fit, r.skip_at_fit, r.at_fit.precision, r.at_fit.recall, r.at_fit.f1, r.at_fit.auprc,
                  r.at_fit.oracle_rate, r.top_at_fit.precision, r.top_at_fit.recall);
      lengths.push_back({{"length", r.context_len}, {"samples", r.num_samples}, {"tau", r.tau},
                         {"skip_at_tau", r.skip_at_tau}, {"tau_fit", r.tau_fit}, {"skip_at_fit", r.skip_at_fit},
                         {"oracle_mass_threshold", reliability_json(r.at_fit)},
                         {"oracle_top_fraction", reliability_json(r.top_at_fit)}});
    }
    const auto& o = res.overall;
    std::printf("overall: precision %.3f recall %.3f F1 %.3f AUPRC %.3f (oracle rate %.4f); mean mass skipped %.4f, "
                "active %.4f; top-fraction oracle: precision %.3f recall %.3f\n",
                o.precision, o.recall, o.f1, o.auprc, o.oracle_rate, o.mean_mass_skipped, o.mean_mass_active,
                res.overall_top.precision, res.overall_top.recall);
    if (o.oracle_rate == 0)
      std::printf("note: no sample reaches the oracle mass %.3f (a model without attention sinks?): precision and "
                  "recall against it are 0 by definition; the top-fraction columns still rank the proxy\n",
                  oracle_mass);
    const auto& c = res.config;
    std::printf("tau(L) = clamp(%.6g + %.6g x + %.6g x^2 + %.6g x^3, %.6g, %.6g), x = L / %.0f (degree %d); "
                "max |skip - target| at the calibrated lengths: %.4f\n",
                c.c0, c.c1, c.c2, c.c3, c.tau_min, c.tau_max, c.length_ref, res.degree, res.max_skip_error);

    json j;  // the config's keys first (sink_router_config_to_json's), then what it came from
    const nlohmann::json cj = vlm::sink_router_config_to_json(c);
    for (const char* k : {"aggregation", "surrogate", "num_dense_layers", "coefficients", "length_ref", "tau_min", "tau_max"})
      j[k] = cj.at(k);
    j["model"] = model_name;
    j["calibration"] = {
        {"tool", "vlm-calibrate-sink"},
        {"target_skip", target},
        {"prompts", fs::path(f.at("prompts")).filename().string()},
        {"num_prompts", prompts.size()},
        {"decode_steps", run.decode_steps},
        {"kv_cache_dtype", vlm::dtype_name(run.kv_dtype)},
        {"oracle", fmt::format("group first-token attention mass ({} over the group) >= {}",
                               vlm::sink_aggregation_name(base.aggregation), oracle_mass)},
        {"fit_degree", res.degree},
        {"max_skip_error", res.max_skip_error},
        {"lengths", lengths},
        {"overall_oracle_mass_threshold", reliability_json(res.overall)},
        {"overall_oracle_top_fraction", reliability_json(res.overall_top)}};
    const fs::path outp(out);
    if (outp.has_parent_path()) {
      std::error_code ec;
      fs::create_directories(outp.parent_path(), ec);
      if (ec) bad_input("cannot create " + outp.parent_path().string() + ": " + ec.message());
    }
    std::ofstream os(out);
    if (!os) bad_input("cannot write --out " + out);
    os << j.dump(2) << "\n";
    if (!os) bad_input("cannot write --out " + out);
    std::printf("wrote %s\n", out.c_str());
    return 0;
  });
}
