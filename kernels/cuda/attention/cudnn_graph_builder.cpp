// cuDNN backend descriptors for CudnnAttention (contract in cudnn_graph_builder.h).
#include "kernels/cuda/attention/cudnn_graph_builder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define VLM_HAVE_CUDNN_HEADERS 1
#else
#define VLM_HAVE_CUDNN_HEADERS 0
#endif

namespace vlm::cuda {

#if VLM_HAVE_CUDNN_HEADERS
using B = CudnnGraphBuilder;
static_assert(B::kFloat == CUDNN_DATA_FLOAT && B::kHalf == CUDNN_DATA_HALF && B::kInt32 == CUDNN_DATA_INT32 &&
              B::kBf16 == CUDNN_DATA_BFLOAT16 && B::kBool == CUDNN_DATA_BOOLEAN);
static_assert(B::kAdd == CUDNN_POINTWISE_ADD && B::kMul == CUDNN_POINTWISE_MUL && B::kDiv == CUDNN_POINTWISE_DIV &&
              B::kSub == CUDNN_POINTWISE_SUB && B::kExp == CUDNN_POINTWISE_EXP && B::kLog == CUDNN_POINTWISE_LOG &&
              B::kCmpGe == CUDNN_POINTWISE_CMP_GE && B::kCmpLt == CUDNN_POINTWISE_CMP_LT &&
              B::kLogicalAnd == CUDNN_POINTWISE_LOGICAL_AND && B::kGenIndex == CUDNN_POINTWISE_GEN_INDEX &&
              B::kBinarySelect == CUDNN_POINTWISE_BINARY_SELECT);
static_assert(B::kReduceAdd == CUDNN_REDUCE_TENSOR_ADD && B::kReduceMax == CUDNN_REDUCE_TENSOR_MAX);

CudnnGraphBuilder::~CudnnGraphBuilder() {
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.BackendDestroyDescriptor(*it);
}

void CudnnGraphBuilder::destroy(Desc d) { api_.BackendDestroyDescriptor(d); }

CudnnGraphBuilder::Desc CudnnGraphBuilder::create(int type, const char* what) {
  Desc d = nullptr;
  const int st = api_.BackendCreateDescriptor(type, &d);
  if (st != 0) throw std::runtime_error(std::string("create ") + what + ": " + api_.describe(st));
  owned_.push_back(d);
  return d;
}

void CudnnGraphBuilder::set(Desc d, int attr, int type, int64_t n, const void* v, const char* what) {
  const int st = api_.BackendSetAttribute(d, attr, type, n, v);
  if (st != 0)
    throw std::runtime_error(std::string("set ") + what + " (attribute " + std::to_string(attr) + "): " + api_.describe(st));
}

void CudnnGraphBuilder::finalize(Desc d, const char* what) {
  const int st = api_.BackendFinalize(d);
  if (st != 0) throw std::runtime_error(std::string("finalize ") + what + ": " + api_.describe(st));
}

CudnnGraphBuilder::Desc CudnnGraphBuilder::tensor(int64_t uid, int dtype, const std::vector<int64_t>& dims,
                                                  const std::vector<int64_t>& strides, bool by_value) {
  Desc t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
  const cudnnDataType_t dt = cudnnDataType_t(dtype);
  const int64_t align = 16;
  const bool is_virtual = uid >= 1000;
  set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
  set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(dims.size()), dims.data(), "tensor dims");
  set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(strides.size()), strides.data(), "tensor strides");
  set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  if (is_virtual) set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
  if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
  finalize(t, ("tensor uid " + std::to_string(uid)).c_str());
  return t;
}

CudnnGraphBuilder::Desc CudnnGraphBuilder::virt(int dtype, const std::vector<int64_t>& dims,
                                                const std::vector<int64_t>& strides) {
  return tensor(next_virtual_uid_++, dtype, dims, strides);
}

CudnnGraphBuilder::Desc CudnnGraphBuilder::matmul(Desc a, Desc b, Desc c, Desc m, Desc n, Desc k) {
  Desc mm = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul comp type");
  finalize(mm, "matmul");
  Desc op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
  set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul A");
  set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul B");
  set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul C");
  set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul desc");
  if (m != nullptr) set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul M override");
  if (n != nullptr) set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, "matmul N override");
  if (k != nullptr) set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, "matmul K override");
  finalize(op, "matmul op");
  return op;
}

CudnnGraphBuilder::Desc CudnnGraphBuilder::pointwise(int mode, int math_prec, Desc x, Desc b, Desc y, Desc t,
                                                     int64_t axis) {
  Desc pw = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
  const cudnnPointwiseMode_t m = cudnnPointwiseMode_t(mode);
  const cudnnDataType_t prec = cudnnDataType_t(math_prec);
  set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &m, "pointwise mode");
  set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
  if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
  const std::string name = "pointwise mode " + std::to_string(mode);
  finalize(pw, name.c_str());
  Desc op = create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise desc");
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise X");
  if (b != nullptr) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise B");
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise Y");
  if (t != nullptr) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise T");
  finalize(op, (name + " op").c_str());
  return op;
}

CudnnGraphBuilder::Desc CudnnGraphBuilder::reduction(int op_kind, Desc x, Desc y) {
  Desc rd = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
  const cudnnReduceTensorOp_t o = cudnnReduceTensorOp_t(op_kind);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &o, "reduction operator");
  set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "reduction comp type");
  finalize(rd, "reduction");
  Desc op = create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
  set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction X");
  set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction Y");
  set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, "reduction desc");
  finalize(op, "reduction op");
  return op;
}

CudnnGraphBuilder::Desc CudnnGraphBuilder::operation_graph(const std::vector<Desc>& ops) {
  Desc g = create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "graph handle");
  set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data(), "graph ops");
  finalize(g, "operation graph");
  return g;
}

int CudnnGraphBuilder::engine_index(Desc cfg) {
  Desc engine = nullptr;
  if (api_.BackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != 0) return -1;
  int64_t n = 0, index = -1;
  if (api_.BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) != 0 ||
      api_.BackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) != 0)
    index = -1;
  api_.BackendDestroyDescriptor(engine);
  return int(index);
}

std::vector<CudnnGraphBuilder::Desc> CudnnGraphBuilder::heuristic_configs(Desc graph, int mode) {
  std::vector<Desc> out;
  try {
    Desc h = create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    const cudnnBackendHeurMode_t m = cudnnBackendHeurMode_t(mode);
    set(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics graph");
    set(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m, "heuristics mode");
    finalize(h, "engine heuristics");
    int64_t count = 0;
    int st = api_.BackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
    if (st != 0) throw std::runtime_error("heuristics result count: " + api_.describe(st));
    note("heuristics mode " + std::to_string(mode) + ": " + std::to_string(count) + " engine configs");
    if (count <= 0) return out;
    std::vector<Desc> cfgs;
    for (int64_t i = 0; i < count; ++i) cfgs.push_back(create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
    int64_t got = 0;
    st = api_.BackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data());
    if (st != 0) throw std::runtime_error("heuristics results: " + api_.describe(st));
    out.assign(cfgs.begin(), cfgs.begin() + std::min(got, count));
  } catch (const std::exception& e) {
    note(std::string("heuristics failed: ") + e.what());
  }
  return out;
}

std::vector<CudnnGraphBuilder::Desc> CudnnGraphBuilder::global_configs(Desc graph) {
  std::vector<Desc> out;
  int64_t count = 0, n = 0;
  int st = api_.BackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &count);
  if (st != 0) {
    note("engine global count: " + api_.describe(st));
    return out;
  }
  note("global engine list: " + std::to_string(count) + " engines");
  for (int64_t i = 0; i < count; ++i) {
    try {
      Desc e = create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
      set(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "engine graph");
      set(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i, "engine index");
      finalize(e, ("engine " + std::to_string(i)).c_str());
      Desc c = create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
      set(c, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e, "config engine");
      finalize(c, "engine config");
      out.push_back(c);
    } catch (const std::exception& ex) {
      note(std::string("  ") + ex.what());
    }
  }
  return out;
}

CudnnGraphBuilder::Desc CudnnGraphBuilder::execution_plan(Desc cfg, int64_t* ws, const std::string& what) {
  const int engine = engine_index(cfg);
  const std::string label = what + " (engine " + std::to_string(engine) + ")";
  try {
    Desc p = create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
    set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "plan handle");
    set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg, "plan config");
    finalize(p, "execution plan");
    int64_t n = 0;
    const int st = api_.BackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, ws);
    if (st != 0) throw std::runtime_error("workspace size: " + api_.describe(st));
    note(label + ": plan finalized, workspace " + std::to_string(*ws) + " bytes");
    return p;
  } catch (const std::exception& e) {
    note(label + ": " + e.what());
    return nullptr;
  }
}

CudnnGraphBuilder::Desc CudnnGraphBuilder::variant_pack(const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                                                        void* workspace, std::string* err) {
  Desc v = nullptr;
  int st = api_.BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &v);
  if (st == 0) st = api_.BackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                             int64_t(uids.size()), uids.data());
  if (st == 0) st = api_.BackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                             int64_t(ptrs.size()), ptrs.data());
  if (st == 0) st = api_.BackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (st == 0) st = api_.BackendFinalize(v);
  if (st == 0) return v;
  *err = api_.describe(st);
  if (v != nullptr) api_.BackendDestroyDescriptor(v);
  return nullptr;
}

#else  // no cuDNN headers at build time: every graph step reports it.

CudnnGraphBuilder::~CudnnGraphBuilder() = default;
void CudnnGraphBuilder::destroy(Desc) {}
static const char* const kNoHeaders = "built without cuDNN headers (cudnn_graph.h)";
CudnnGraphBuilder::Desc CudnnGraphBuilder::tensor(int64_t, int, const std::vector<int64_t>&, const std::vector<int64_t>&,
                                                  bool) { throw std::runtime_error(kNoHeaders); }
CudnnGraphBuilder::Desc CudnnGraphBuilder::virt(int, const std::vector<int64_t>&, const std::vector<int64_t>&) {
  throw std::runtime_error(kNoHeaders);
}
CudnnGraphBuilder::Desc CudnnGraphBuilder::matmul(Desc, Desc, Desc, Desc, Desc, Desc) {
  throw std::runtime_error(kNoHeaders);
}
CudnnGraphBuilder::Desc CudnnGraphBuilder::pointwise(int, int, Desc, Desc, Desc, Desc, int64_t) {
  throw std::runtime_error(kNoHeaders);
}
CudnnGraphBuilder::Desc CudnnGraphBuilder::reduction(int, Desc, Desc) { throw std::runtime_error(kNoHeaders); }
CudnnGraphBuilder::Desc CudnnGraphBuilder::operation_graph(const std::vector<Desc>&) { throw std::runtime_error(kNoHeaders); }
std::vector<CudnnGraphBuilder::Desc> CudnnGraphBuilder::heuristic_configs(Desc, int) { return {}; }
std::vector<CudnnGraphBuilder::Desc> CudnnGraphBuilder::global_configs(Desc) { return {}; }
CudnnGraphBuilder::Desc CudnnGraphBuilder::execution_plan(Desc, int64_t*, const std::string&) { return nullptr; }
CudnnGraphBuilder::Desc CudnnGraphBuilder::variant_pack(const std::vector<int64_t>&, const std::vector<void*>&, void*,
                                                        std::string* err) {
  *err = kNoHeaders;
  return nullptr;
}

#endif

}  // namespace vlm::cuda
