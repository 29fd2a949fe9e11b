#include "kernels/cuda/core/peer_or_nccl_communicator.h"

#include <cstdlib>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/device_error.h"
#include "kernels/core/log.h"

namespace vlm::cuda {

const char* all_reduce_mode_name(AllReduceMode m) {
  switch (m) {
    case AllReduceMode::kAuto: return "auto";
    case AllReduceMode::kPeer: return "peer";
    case AllReduceMode::kNccl: return "nccl";
  }
  return "?";
}

AllReduceChoice all_reduce_choice_from_env() {
  AllReduceChoice c;
  if (const char* e = std::getenv("VLM_TP_ALLREDUCE"); e != nullptr && *e != '\0') {
    const std::string v(e);
    if (v == "auto")
      c.mode = AllReduceMode::kAuto;
    else if (v == "peer")
      c.mode = AllReduceMode::kPeer;
    else if (v == "nccl")
      c.mode = AllReduceMode::kNccl;
    else
      throw LoadError(fmt::format("VLM_TP_ALLREDUCE={}: expected nccl, peer or auto", v));
  }
  if (const char* e = std::getenv("VLM_TP_ALLREDUCE_MAX_BYTES"); e != nullptr && *e != '\0') {
    char* end = nullptr;
    const long long n = std::strtoll(e, &end, 10);
    if (end == e || *end != '\0' || n <= 0 || n > (1LL << 32))
      throw LoadError(fmt::format("VLM_TP_ALLREDUCE_MAX_BYTES={}: expected a byte count in 1..4294967296", e));
    c.max_bytes = static_cast<size_t>(n);
  }
  return c;
}

std::shared_ptr<PeerAllReduce> make_peer_all_reduce(const std::vector<int>& devices, const AllReduceChoice& choice) {
  if (choice.mode == AllReduceMode::kNccl) return nullptr;
  std::string why;
  if (!peer_access_possible(devices, &why)) {
    if (choice.mode == AllReduceMode::kPeer) throw DeviceError("VLM_TP_ALLREDUCE=peer: " + why);
    VLM_LOG_INFO("tensor parallel all-reduce: NCCL only ({})", why);
    return nullptr;
  }
  auto peer = std::make_shared<PeerAllReduce>(devices, choice.max_bytes);
  VLM_LOG_INFO("tensor parallel all-reduce: peer access up to {} bytes, NCCL above", peer->capacity_bytes());
  return peer;
}

PeerOrNcclCommunicator::PeerOrNcclCommunicator(std::unique_ptr<Communicator> nccl, std::shared_ptr<PeerAllReduce> peer)
    : nccl_(std::move(nccl)), peer_(std::move(peer)) {
  VLM_CHECK(nccl_ != nullptr, "PeerOrNcclCommunicator without NCCL");
  VLM_CHECK(peer_ == nullptr || peer_->size() == nccl_->size(), "peer all-reduce of {} ranks beside NCCL of {}",
            peer_ ? peer_->size() : 0, nccl_->size());
}

void PeerOrNcclCommunicator::all_reduce_sum(void* buf, int64_t count, DType dtype, void* stream) {
  if (peer_ != nullptr && peer_->accepts(count, dtype)) {
    ++peer_calls_;
    peer_->all_reduce_sum(rank(), buf, count, dtype, static_cast<cudaStream_t>(stream));
    return;
  }
  ++nccl_calls_;
  nccl_->all_reduce_sum(buf, count, dtype, stream);
}

void PeerOrNcclCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype, void* stream) {
  nccl_->all_gather(in, out, count, dtype, stream);
}

}  // namespace vlm::cuda
