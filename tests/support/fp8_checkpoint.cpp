#include "tests/support/fp8_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/fp8.h"
#include "model/decoder/json_file.h"
#include "model/decoder/safetensors.h"
#include "model/decoder/weights.h"

namespace vlm::testing {
namespace {

// q [N, K] and s [ceil(N/b), ceil(K/b)] (bf16-rounded) of w per b x b block.
void quantize_blocks(const float* w, int64_t N, int64_t K, int64_t b, uint8_t* q, float* s) {
  const int64_t NB = (N + b - 1) / b, KB = (K + b - 1) / b;
  for (int64_t i = 0; i < NB; ++i)
    for (int64_t j = 0; j < KB; ++j) {
      float amax = 0;
      for (int64_t n = i * b; n < std::min(N, (i + 1) * b); ++n)
        for (int64_t k = j * b; k < std::min(K, (j + 1) * b); ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
      const float sc = bf16_to_f32(f32_to_bf16(amax > 0 ? amax / kFp8E4M3Max : 1.0f));
      s[i * KB + j] = sc;
      for (int64_t n = i * b; n < std::min(N, (i + 1) * b); ++n)
        for (int64_t k = j * b; k < std::min(K, (j + 1) * b); ++k) q[n * K + k] = f32_to_fp8_e4m3(w[n * K + k] / sc);
    }
}

}  // namespace

std::string write_fp8_checkpoint(const std::string& src_dir, const std::string& out_dir, Fp8Scales scales,
                                 int64_t block, bool dequantized) {
  namespace fs = std::filesystem;
  VLM_CHECK(scales != Fp8Scales::None, "write_fp8_checkpoint: a format");
  fs::create_directories(out_dir);
  nlohmann::json config = read_json_file(src_dir + "/config.json");
  if (!dequantized) {
    if (scales == Fp8Scales::Block) {
      config["quantization_config"] = {{"quant_method", "fp8"},
                                       {"fmt", "e4m3"},
                                       {"activation_scheme", "dynamic"},
                                       {"weight_block_size", {block, block}}};
    } else {
      config["quantization_config"] = {
          {"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"symmetric", true}, {"dynamic", false}}},
              {"input_activations",
               {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"symmetric", true}, {"dynamic", true}}}}}}}};
    }
  }
  std::ofstream(out_dir + "/config.json") << config.dump(2);
  if (fs::exists(src_dir + "/generation_config.json"))
    fs::copy_file(src_dir + "/generation_config.json", out_dir + "/generation_config.json",
                  fs::copy_options::overwrite_existing);
  const WeightStore src = WeightStore::open(src_dir);
  const std::regex linear(R"(model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.weight)");
  std::map<std::string, TensorView> out;
  std::vector<Tensor> keep;
  auto add = [&](const std::string& name, Tensor t) {
    out[name] = t.view();
    keep.push_back(std::move(t));
  };
  for (const auto& [name, view] : src.tensors()) {
    if (!std::regex_match(name, linear) || view.ndim() != 2) {
      out[name] = view;
      continue;
    }
    const int64_t N = view.dim(0), K = view.dim(1);
    std::vector<float> w(static_cast<size_t>(N * K));
    convert_to_f32(view.data, view.dtype, w.data(), N * K);
    Tensor q = Tensor::empty({N, K}, DType::F8_E4M3);
    auto* qp = static_cast<uint8_t*>(q.data());
    Tensor deq = Tensor::empty({N, K}, DType::F32);
    if (scales == Fp8Scales::Block) {
      const int64_t NB = (N + block - 1) / block, KB = (K + block - 1) / block;
      std::vector<float> s(static_cast<size_t>(NB * KB));
      quantize_blocks(w.data(), N, K, block, qp, s.data());
      dequantize_fp8_blocks(qp, s.data(), block, block, N, K, deq.as<float>());
      Tensor st = Tensor::empty({NB, KB}, DType::BF16);
      convert_from_f32(s.data(), DType::BF16, st.data(), NB * KB);
      if (!dequantized) add(name + "_scale_inv", std::move(st));
    } else {
      Tensor st = Tensor::empty({N, 1}, DType::F32);
      quantize_fp8_rows(w.data(), N, K, qp, st.as<float>());
      dequantize_fp8_rows(qp, st.as<float>(), N, K, deq.as<float>());
      if (!dequantized) add(name + "_scale", std::move(st));
    }
    add(name, dequantized ? std::move(deq) : std::move(q));
  }
  write_safetensors(out_dir + "/model.safetensors", out);
  return out_dir;
}

double top1_agreement(const float* ours, const float* ref, int64_t rows, int64_t V) {
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = ours + r * V;
    const float* b = ref + r * V;
    same += (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b) ? 1 : 0;
  }
  return rows > 0 ? static_cast<double>(same) / static_cast<double>(rows) : 1.0;
}

}  // namespace vlm::testing
