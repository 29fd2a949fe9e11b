// bench_cuda_decoder: the GPU decoder's speed on a checkpoint (bench/gpu_speed.sh runs it on a
// Qwen2-7B-shaped random bf16 model beside transformers):
//   decode: B sequences at `context` tokens each (prefilled first), then `steps` decode steps of
//           B rows each, every step = forward + GPU sampling (greedy) + ids back to the host;
//           reports ms/step and tokens/s (median of the steps after 3 warm-up steps);
//   prefill: one sequence of L tokens as one chunk (logits of its last row, sampled); tokens/s
//           of the median of `reps` runs after one warm-up run
//           (and a "gpu-clock prefill L:" line: the SM clock, power and clock-limit reasons NVML
//           reported while the timed reps ran, bench/cuda/nvml_sampler.h; absent without NVML).
// Usage: bench_cuda_decoder --model DIR [--dtype bfloat16|float16|float32] [--batches 1,64]
//          [--context 1024] [--steps 64] [--prefill 8192,32768] [--reps 3] [--enforce-eager 0|1]
//          [--quantization none|fp8] [--kv-cache-dtype auto|fp8] [--dump-logits FILE]
//          [--tensor-parallel-size N | -tp N] [--load-format auto|safetensors|dummy]
// --tensor-parallel-size N: the decoder split over GPUs 0..N-1 (CudaBackend with a CudaRankGroup,
// NCCL all-reduces inside the decode graphs; issue 42); sampling on GPU 0.
// --load-format dummy: random weights made from DIR/config.json alone (WeightStore::dummy), streamed
// to the GPU one layer's tensors at a time (kDummyStreamBytes on the host), so a 72B-shaped model
// loads on a machine whose disk cannot hold its checkpoint (bench/cuda/big_rows.sh); the "load:"
// line's seconds then include making the weights. DIR may hold a text (CausalLM) config or a
// vision-language one (Qwen2-VL, ...): the bench runs its decoder.
// --kv-cache-dtype fp8: the KV cache in FP8 E4M3 (CudaDecoderOptions::kv_fp8; auto: the dtype's).
// --quantization fp8: the decoder's linear layers in FP8 (CudaDecoderOptions::quantize_fp8;
// bench/gpu_speed.sh's VLM_SPEED_FP8=1 runs the same rows both ways in one call).
// Decode steps run as CUDA graphs unless --enforce-eager 1 (the line says how many were captured,
// and whether the step's kernels used programmatic dependent launch: VLM_CUDA_PDL, kernels/cuda/core/pdl.h;
// and the median host time of a step until forward() returned: the batch built, the metadata staged, the graph enqueued).
// --dump-logits FILE (issue 39: old vs refactored binaries, `cmp` bit for bit; bench_dump.h):
// raw little-endian f32, one record per configuration in the order the bench runs them:
//   for each B of --batches: the logits [B, V] of the LAST measured decode step;
//   for each L of --prefill: the logits [1, V] (the last row) of the LAST rep's prefill.
// Only the last step of a configuration: every step's logits at 64 sequences would be 2.5 GB
// for a 152K vocabulary; the last step depends on every earlier one through the KV cache and
// the greedy tokens fed back. The logits are copied after the step's timed region ends (the
// sampler only reads them). Inputs are deterministic: prompt tokens from std::mt19937 seeded 1,
// drawn in the same order for the same flags; decode tokens are the greedy samples; KV blocks
// are handed out from 0 for each configuration. (A stdout line per record gives its offset.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda/bench_dump.h"
#include "bench/cuda/nvml_sampler.h"
#include "engine/cuda/cuda_backend.h"
#include "model/families/architecture.h"
#include "model/families/model.h"
#include "kernels/core/log.h"
#include "kernels/cuda/core/cuda_check.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> list(const std::string& s) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = s.find(',', i);
    out.push_back(std::stoll(s.substr(i, j == std::string::npos ? std::string::npos : j - i)));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
  int32_t cached = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> f = {{"dtype", "bfloat16"}, {"batches", "1,64"}, {"context", "1024"},
                                          {"steps", "64"}, {"prefill", "8192,32768"}, {"reps", "3"},
                                          {"enforce-eager", "0"}, {"quantization", "none"},
                                          {"kv-cache-dtype", "auto"}, {"tensor-parallel-size", "1"},
                                          {"load-format", "auto"}};
  bool bad = argc % 2 == 0;  // a flag without its value
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const std::string k = a == "-tp" ? std::string("tensor-parallel-size") : a.rfind("--", 0) == 0 ? a.substr(2) : std::string();
    if (!f.count(k) && k != "model" && k != "dump-logits") bad = true;  // an unknown flag
    f[k] = argv[i + 1];
  }
  if (bad || !f.count("model")) {
    std::fprintf(stderr, "usage: bench_cuda_decoder --model DIR [--dtype ..] [--batches 1,64] [--context 1024] "
                         "[--steps 64] [--prefill 8192,32768] [--reps 3] [--enforce-eager 0|1] "
                         "[--quantization none|fp8] [--kv-cache-dtype auto|fp8] [--dump-logits FILE] "
                         "[--tensor-parallel-size N] [--load-format auto|safetensors|dummy]\n");
    return 2;
  }
  try {
    vlm::set_log_level("info");
    vlm::bench::BenchDump dump(f["dump-logits"]);  // opened first: a bad path fails before the GPU work
    const auto batches = list(f["batches"]), prefills = f["prefill"] == "0" ? std::vector<int64_t>{} : list(f["prefill"]);
    const int64_t context = std::stoll(f["context"]), steps = std::stoll(f["steps"]), reps = std::stoll(f["reps"]);
    const int B = 16;
    int64_t max_prefill = 8192;
    for (int64_t p : prefills) max_prefill = std::max(max_prefill, p);
    int64_t max_batch = 1;
    for (int64_t b : batches) max_batch = std::max(max_batch, b);
    int64_t blocks_needed = max_batch * ((context + steps + 8 + B - 1) / B + 1);
    blocks_needed = std::max(blocks_needed, (max_prefill + B - 1) / B + 1);

    const std::optional<vlm::LoadFormat> format = vlm::parse_load_format(f["load-format"]);
    if (!format) {
      std::fprintf(stderr, "--load-format must be auto, safetensors or dummy, got '%s'\n", f["load-format"].c_str());
      return 2;
    }
    vlm::WeightLoadOptions load_options;
    load_options.format = *format;
    if (*format == vlm::LoadFormat::Dummy) load_options.dummy_keep_bytes = vlm::kDummyStreamBytes;
    std::unique_ptr<vlm::LlmDecoder> text_model;  // a CausalLM checkpoint
    std::unique_ptr<vlm::Model> vl_model;         // else a vision-language one: its decoder
    if (vlm::detect_architecture(f["model"]) == vlm::ModelArchitecture::CausalLM)
      text_model = vlm::LlmDecoder::load(f["model"], load_options);
    else
      vl_model = vlm::load_model(f["model"], load_options);
    const vlm::LlmDecoder* host = text_model ? text_model.get() : &vl_model->decoder();
    vlm::CudaDecoderOptions o;
    o.dtype = f["dtype"] == "float32" ? vlm::DType::F32 : (f["dtype"] == "float16" ? vlm::DType::F16 : vlm::DType::BF16);
    o.block_size = B;
    o.num_kv_blocks = blocks_needed;
    o.max_tokens_per_step = max_prefill;
    o.max_model_len = std::max(max_prefill, context + steps + 8);  // sizes cuDNN's chunked-prefill K/V scratch
    o.max_logit_rows = std::max<int64_t>(max_batch, 64);
    o.enforce_eager = f["enforce-eager"] == "1";
    if (f["quantization"] != "none" && f["quantization"] != "fp8") {
      std::fprintf(stderr, "--quantization must be none or fp8, got '%s'\n", f["quantization"].c_str());
      return 2;
    }
    o.quantize_fp8 = f["quantization"] == "fp8";
    if (f["kv-cache-dtype"] != "auto" && f["kv-cache-dtype"] != "fp8") {
      std::fprintf(stderr, "--kv-cache-dtype must be auto or fp8, got '%s'\n", f["kv-cache-dtype"].c_str());
      return 2;
    }
    o.kv_fp8 = f["kv-cache-dtype"] == "fp8";
    const int tp = std::stoi(f["tensor-parallel-size"]);
    if (tp < 1 || tp > vlm::cuda::visible_gpus()) {
      std::fprintf(stderr, "--tensor-parallel-size %d: %d GPUs visible\n", tp, vlm::cuda::visible_gpus());
      return 2;
    }
    const auto t_load = Clock::now();
    vlm::CudaBackend backend(*host, o, {}, nullptr, tp > 1 ? std::make_unique<vlm::CudaRankGroup>(tp) : nullptr);
    std::printf("load: %.1f s (%.2f GiB of weights%s%s on %s, tensor parallel %d)\n",
                std::chrono::duration<double>(Clock::now() - t_load).count(),
                static_cast<double>(backend.decoder().weight_bytes()) / (1 << 30), o.quantize_fp8 ? ", FP8 linear layers" : "",
                o.kv_fp8 ? ", FP8 KV cache" : "", vlm::cuda::describe_gpu(0).c_str(), tp);
    if (const vlm::DummyWeights* d = host->weights().dummy_weights())
      std::printf("dummy weights: %.2f GiB made on the host (%s), at most %.2f GiB held at once\n",
                  static_cast<double>(d->bytes_made()) / (1 << 30), vlm::dtype_name(d->dtype()),
                  static_cast<double>(vlm::kDummyStreamBytes) / (1 << 30));
    const int64_t V = host->config().vocab_size;
    std::mt19937 rng(1);
    int32_t next_block = 0;
    auto new_seq = [&](int64_t len) {
      Seq s;
      for (int64_t i = 0; i < len; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(V)));
      return s;
    };
    vlm::SamplingParams greedy;
    greedy.temperature = 0;
    vlm::Sequence sampler_seq(0, {0}, greedy);
    // The host's part of the last step: seconds from its start until forward() returned (the batch
    // built, the metadata staged, the graph or kernels enqueued: the GPU waits on it between steps).
    double last_enqueue = 0;
    // Runs one step: each seq feeds n[i] tokens; samples the last row of each; returns seconds.
    auto step = [&](std::vector<Seq*> seqs, const std::vector<int64_t>& n) {
      std::vector<vlm::SequenceChunk> chunks;
      for (size_t i = 0; i < seqs.size(); ++i) {
        Seq& s = *seqs[i];
        while (static_cast<int64_t>(s.blocks.size()) * B < s.cached + n[i]) s.blocks.push_back(next_block++);
        vlm::SequenceChunk c;
        c.token_ids = std::span<const int32_t>(s.tokens.data() + s.cached, static_cast<size_t>(n[i]));
        c.start_pos = s.cached;
        c.block_table = s.blocks;
        chunks.push_back(c);
      }
      const auto t0 = Clock::now();
      backend.forward(vlm::make_forward_batch(chunks, B), vlm::EmbeddingOverride{});
      last_enqueue = std::chrono::duration<double>(Clock::now() - t0).count();
      std::vector<vlm::SampleTask> tasks;
      for (size_t i = 0; i < seqs.size(); ++i) tasks.push_back({&sampler_seq, static_cast<int64_t>(i)});
      std::vector<vlm::SampleResult> out;
      backend.sample(tasks, out);  // synchronizes: ids are on the host
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      for (size_t i = 0; i < seqs.size(); ++i) {
        seqs[i]->cached += static_cast<int32_t>(n[i]);
        if (seqs[i]->cached == static_cast<int32_t>(seqs[i]->tokens.size())) seqs[i]->tokens.push_back(out[i].token_id);
      }
      return dt;
    };

    // The last step's logits [rows, V] into the dump (after its timed region: step() has returned).
    std::vector<float> logits;
    auto dump_logits = [&](const std::string& what) {
      backend.decoder().download_logits(logits);
      dump.append(what, logits.data(), static_cast<int64_t>(logits.size()) / V, V);
    };

    for (int64_t batch : batches) {
      next_block = 0;
      std::vector<Seq> seqs;
      for (int64_t i = 0; i < batch; ++i) seqs.push_back(new_seq(context));
      // Prefill in groups that fit a step.
      const int64_t per_step = std::max<int64_t>(1, max_prefill / context);
      for (int64_t i = 0; i < batch; i += per_step) {
        std::vector<Seq*> group;
        std::vector<int64_t> n;
        for (int64_t j = i; j < std::min(batch, i + per_step); ++j) {
          group.push_back(&seqs[j]);
          n.push_back(context);
        }
        step(group, n);
      }
      std::vector<Seq*> all;
      for (Seq& s : seqs) all.push_back(&s);
      std::vector<double> times, enqueue;
      for (int64_t k = 0; k < steps + 3; ++k) {
        const double dt = step(all, std::vector<int64_t>(all.size(), 1));
        if (k >= 3) times.push_back(dt), enqueue.push_back(last_enqueue);
      }
      if (dump.enabled()) dump_logits("decode batch " + std::to_string(batch) + " last step");
      const double ms = 1e3 * median(times);
      std::printf("decode batch %ld context %ld: %.3f ms/step, %.1f tokens/s (%s: %ld graphs captured, %ld launched; "
                  "PDL %s; host enqueue %.1f us; short-decode layers enqueued %ld)\n",
                  static_cast<long>(batch), static_cast<long>(context), ms, 1e3 * static_cast<double>(batch) / ms,
                  o.enforce_eager ? "eager" : "graphs", static_cast<long>(backend.decoder().graphs_captured()),
                  static_cast<long>(backend.decoder().graph_launches()), backend.decoder().pdl() ? "on" : "off",
                  1e6 * median(enqueue), static_cast<long>(backend.decoder().decode_short_layers()));
    }
    vlm::bench::NvmlSampler nvml(o.device);  // the chip's clock while the timed prefills ran (issue 44)
    for (int64_t len : prefills) {
      std::vector<double> times;
      for (int64_t r = 0; r < reps + 1; ++r) {
        next_block = 0;
        Seq s = new_seq(len);
        if (r == 1) nvml.start();
        const double dt = step({&s}, {len});
        if (r > 0) times.push_back(dt);
      }
      const vlm::bench::NvmlSampler::Stats st = nvml.stop();
      if (st.samples > 0)
        std::printf("gpu-clock prefill %ld: sm_mhz=%.0f (%u..%u) power_w=%.0f reasons=0x%llx samples=%d\n",
                    static_cast<long>(len), st.mean_sm_mhz, st.min_sm_mhz, st.max_sm_mhz, st.mean_power_w, st.reasons,
                    st.samples);
      if (dump.enabled()) dump_logits("prefill " + std::to_string(len) + " last rep");
      const double t = median(times);
      std::printf("prefill %ld tokens: %.3f s, %.0f tokens/s\n", static_cast<long>(len), t,
                  static_cast<double>(len) / t);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_decoder: %s\n", e.what());
    return 1;
  }
  return 0;
}
