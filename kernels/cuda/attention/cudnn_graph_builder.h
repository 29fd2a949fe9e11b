// A thin helper over cuDNN's backend descriptors (cudnn_library.h): creates tensors and
// operations, the operation graph, engine configs (heuristics or the global engine list),
// execution plans and variant packs; owns every descriptor it creates (destroyed with it) and
// keeps a log of each step (status names and cuDNN's messages). Graph-building calls throw
// std::runtime_error naming the descriptor, attribute and status; the plan/config calls record
// failures in the log and return null / fewer configs instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/attention/cudnn_library.h"

namespace vlm::cuda {

class CudnnGraphBuilder {
 public:
  using Desc = CudnnApi::Desc;
  // cuDNN's enum values (checked against cudnn_graph.h where it is found at build time).
  static constexpr int kFloat = 0, kHalf = 2, kInt32 = 4, kBf16 = 9, kBool = 11;           // cudnnDataType_t
  static constexpr int kAdd = 0, kMul = 1, kDiv = 6, kSub = 9, kExp = 13, kLog = 15,       // cudnnPointwiseMode_t
      kCmpGe = 303, kCmpLt = 304, kLogicalAnd = 400, kGenIndex = 501, kBinarySelect = 601;
  static constexpr int kReduceAdd = 0, kReduceMax = 3;                                     // cudnnReduceTensorOp_t

  CudnnGraphBuilder(const CudnnApi& api, void* handle) : api_(api), handle_(handle) {}
  ~CudnnGraphBuilder();
  CudnnGraphBuilder(const CudnnGraphBuilder&) = delete;
  CudnnGraphBuilder& operator=(const CudnnGraphBuilder&) = delete;

  // A real tensor (uid > 0; by_value: a host scalar passed by pointer in the variant pack).
  Desc tensor(int64_t uid, int dtype, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
              bool by_value = false);
  // A virtual tensor (an intermediate; uid assigned from 1000 up).
  Desc virt(int dtype, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);
  // f32 compute. m / n / k: optional int32 tensors [b, 1, 1, 1] overriding the GEMM's M, N, K per
  // batch entry at run time (the real lengths of a padded attention; cuDNN's *_OVERRIDE_DESC).
  Desc matmul(Desc a, Desc b, Desc c, Desc m = nullptr, Desc n = nullptr, Desc k = nullptr);
  // y = mode(x, b) (b may be null for unary modes); t: BINARY_SELECT's mask; axis >= 0: GEN_INDEX's.
  Desc pointwise(int mode, int math_prec, Desc x, Desc b, Desc y, Desc t = nullptr, int64_t axis = -1);
  Desc reduction(int op, Desc x, Desc y);  // f32 compute
  Desc operation_graph(const std::vector<Desc>& ops);
  // Engine configs from heuristics (mode: cudnnBackendHeurMode_t), in order; empty on failure.
  std::vector<Desc> heuristic_configs(Desc graph, int mode);
  // One config per engine of the global list that finalizes for the graph.
  std::vector<Desc> global_configs(Desc graph);
  // A finalized execution plan for cfg (workspace bytes in *ws), or null (logged under `what`).
  Desc execution_plan(Desc cfg, int64_t* ws, const std::string& what);
  // A variant pack (caller destroys it with destroy()); null with *err on failure.
  Desc variant_pack(const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, void* workspace,
                    std::string* err);
  void destroy(Desc d);

  void note(const std::string& line) { log_ += line + "\n"; }
  const std::string& log() const { return log_; }

 private:
  Desc create(int type, const char* what);
  void set(Desc d, int attr, int type, int64_t n, const void* v, const char* what);
  void finalize(Desc d, const char* what);
  int engine_index(Desc cfg);  // the config's engine's global index, -1 if unknown

  const CudnnApi& api_;
  void* handle_;
  std::vector<Desc> owned_;
  int64_t next_virtual_uid_ = 1000;
  std::string log_;
};

}  // namespace vlm::cuda
