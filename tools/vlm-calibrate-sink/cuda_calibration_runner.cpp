// make_cuda_calibration_runner (calibration_run.h): the recording's forward passes on the GPU
// decoder. Its SinkRouter step measures the routed rows' scores, decisions and first-token masses
// on the device and hands them to the anchor stores' probes in settle_methods().
#include <algorithm>

#include "kernels/core/check.h"
#include "tools/vlm-calibrate-sink/calibration_run.h"

#if VLM_HAVE_CUDA
#include "model/decoder/cuda/cuda_decoder.h"
#endif

namespace vlm {

#if VLM_HAVE_CUDA
namespace {

class CudaRunner : public CalibrationRunner {
 public:
  CudaRunner(const LlmDecoder& dec, const CalibrationRunOptions& opt) {
    int64_t longest = 0;
    for (int l : opt.lengths) longest = std::max<int64_t>(longest, l);
    CudaDecoderOptions o;
    o.dtype = opt.kv_dtype;
    o.block_size = opt.block_size;
    o.num_kv_blocks = (longest + opt.decode_steps + opt.block_size - 1) / opt.block_size;
    o.max_tokens_per_step = opt.prefill_chunk;
    o.max_logit_rows = 1;
    gpu_ = std::make_unique<CudaDecoder>(dec, o);
  }
  void reset(int64_t num_blocks) override {
    VLM_CHECK(num_blocks <= gpu_->num_kv_blocks(), "{} blocks > the GPU cache's {}", num_blocks, gpu_->num_kv_blocks());
  }
  void forward(const ForwardBatch& fb, std::vector<float>& logits) override {
    gpu_->forward(fb);
    gpu_->download_logits(logits);  // synchronizes
    gpu_->settle_methods();         // the probes see the step's routed rows
  }

 private:
  std::unique_ptr<CudaDecoder> gpu_;
};

}  // namespace

std::unique_ptr<CalibrationRunner> make_cuda_calibration_runner(const LlmDecoder& decoder,
                                                                const CalibrationRunOptions& opt) {
  return std::make_unique<CudaRunner>(decoder, opt);
}
#else
std::unique_ptr<CalibrationRunner> make_cuda_calibration_runner(const LlmDecoder&, const CalibrationRunOptions&) {
  throw InternalError("vlm-calibrate-sink --device cuda: this build has no CUDA backend");
}
#endif

}  // namespace vlm
