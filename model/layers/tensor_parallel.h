// Tensor parallelism (issue 42) as the architectures see it: which rank of how many this copy of
// the model is, the Communicator its collectives go through, and ShardedWeightSource, the
// checkpoint as rank r reads it. Column-parallel layers (q/k/v, gate/up, a vocab-split LM head)
// take rows of their tensors (LinearPart's row range, no copy); row-parallel ones (o, down) take
// columns, which ShardedWeightSource copies out of the checkpoint once (its own memory).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kernels/core/communicator.h"
#include "kernels/core/tensor.h"
#include "model/layers/weight_source.h"

namespace vlm {

struct TensorParallel {
  int rank = 0, size = 1;
  Communicator* comm = nullptr;  // non-null when size > 1; outlives the model
  bool enabled() const { return size > 1; }
};

// The heads, KV heads and MLP columns of rank r of N (the decoder's shard). Query heads split
// evenly (H % N == 0); KV heads split evenly when Hkv >= N (Hkv % N == 0), else each rank keeps
// the one KV head its query heads read (N % Hkv == 0: replicated over N / Hkv ranks); the MLP's
// inner columns split evenly (I % N == 0); the vocabulary split evenly when V % N == 0, else the
// LM head is replicated (vocab_split false, every rank computes all logits).
struct DecoderShard {
  int64_t heads = 0, head_begin = 0;        // this rank's query heads [head_begin, head_begin + heads)
  int64_t kv_heads = 0, kv_head_begin = 0;  // its KV heads
  int64_t inner = 0, inner_begin = 0;       // its MLP columns
  int64_t vocab = 0, vocab_begin = 0;       // its LM head rows
  bool vocab_split = false;
};
// Throws LoadError naming the shape that does not divide (e.g. "4 query heads over 3 ranks").
DecoderShard decoder_shard(int64_t heads, int64_t kv_heads, int64_t inner, int64_t vocab, const TensorParallel& tp);

// A checkpoint's tensors as rank r reads them: a tensor registered with slice_cols() reads as its
// columns [begin, end) (a copy, made on first read and kept; over a dummy store only those columns
// are made, WeightStore::get_slice, held by the store), every other as stored; row ranges
// (WeightSource::get_rows, the column-parallel layers) reach the store, so a dummy load makes each
// rank's rows only. FP8 checkpoints' weights (WeightSource::fp8): a column-sliced one reads as its
// q's columns with every output channel's scale (per-channel scales as stored; 128x128 block
// scales: the grid's columns [begin / bk, ceil(end / bk)), LoadError naming the tensor when begin or
// end (short of K) cuts a block); get() reads them dequantized. Copies share the state: the source
// must outlive the layers made from it (they may keep views of the copies).
class ShardedWeightSource {
 public:
  explicit ShardedWeightSource(const WeightStore& store);
  // `name` (full checkpoint name) of shape `full` [rows, cols] reads as [rows, end - begin].
  void slice_cols(const std::string& name, const Shape& full, int64_t begin, int64_t end);
  // The source of the tensors under `prefix`.
  WeightSource under(const std::string& prefix) const;

 private:
  struct Slice {
    Shape full;
    int64_t begin = 0, end = 0;
  };
  struct State {
    const WeightStore* store = nullptr;
    std::mutex mu;
    std::map<std::string, Slice> slices;
    std::map<std::string, Tensor> copies;
    std::map<std::string, Tensor> fp8_copies;  // the q columns of sliced FP8 weights
  };
  static TensorView lookup(State& st, const std::string& name, const Shape& expected);
  static std::optional<Fp8Weight> fp8_lookup(State& st, const std::string& name, const Shape& expected);
  std::shared_ptr<State> state_;
};

}  // namespace vlm
