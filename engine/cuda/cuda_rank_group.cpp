#include "engine/cuda/cuda_rank_group.h"

#include <numeric>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/cuda_device_guard.h"

namespace vlm {

CudaRankGroup::CudaRankGroup(int size) : size_(size), errors_(static_cast<size_t>(size)) {
  VLM_CHECK(size >= 2, "a rank group of {} GPUs", size);
  const cuda::CudaDeviceGuard restore;
  std::vector<int> devices(static_cast<size_t>(size));
  std::iota(devices.begin(), devices.end(), 0);
  nccl_ = std::make_shared<cuda::NcclGroup>(devices);
  peer_ = cuda::make_peer_all_reduce(devices, cuda::all_reduce_choice_from_env());
  for (int r = 0; r < size; ++r)
    comms_.push_back(
        std::make_unique<cuda::PeerOrNcclCommunicator>(std::make_unique<cuda::NcclCommunicator>(nccl_, r), peer_));
}

CudaRankGroup::~CudaRankGroup() {
  const cuda::CudaDeviceGuard restore;  // each decoder is freed on its GPU, then the caller's is back
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (size_t i = 0; i < decoders_.size(); ++i) {
    cudaSetDevice(static_cast<int>(i) + 1);
    decoders_[i].reset();
  }
}

int64_t CudaRankGroup::peer_all_reduces() const {
  int64_t n = 0;
  for (const auto& c : comms_) n += c->peer_calls();
  return n;
}

void CudaRankGroup::build(const LlmDecoder& host, const CudaDecoderOptions& base, int64_t num_kv_blocks) {
  VLM_CHECK(decoders_.empty(), "rank group built twice");
  const cuda::CudaDeviceGuard restore;  // each decoder built on its GPU, then the caller's is back
  for (int r = 1; r < size_; ++r) {
    CudaDecoderOptions o = base;
    o.device = r;
    o.tp = rank(r);
    o.num_kv_blocks = num_kv_blocks;
    VLM_CUDA_CHECK(cudaSetDevice(r));
    decoders_.push_back(std::make_unique<CudaDecoder>(host, o));
  }
  for (int r = 1; r < size_; ++r) threads_.emplace_back([this, r] { loop(r); });
}

void CudaRankGroup::loop(int r) {
  cudaSetDevice(r);
  int64_t seen = 0;
  for (;;) {
    std::function<void(CudaDecoder&)> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr err;
    try {
      job(decoder(r));
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      errors_[static_cast<size_t>(r)] = err;
      --pending_;
    }
    cv_.notify_all();
  }
}

void CudaRankGroup::start(std::function<void(CudaDecoder&)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    VLM_CHECK(pending_ == 0, "a rank job started before the last one was joined");
    job_ = std::move(fn);
    pending_ = size_ - 1;
    ++generation_;
  }
  cv_.notify_all();
}

void CudaRankGroup::join() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  for (std::exception_ptr& e : errors_)
    if (e) {
      std::exception_ptr first = e;
      for (std::exception_ptr& x : errors_) x = nullptr;
      std::rethrow_exception(first);
    }
}

}  // namespace vlm
