#include "kernels/cuda/core/nccl_communicator.h"

#include "kernels/cuda/core/dl_library.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/device_error.h"
#include "kernels/core/log.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
// The ABI declared in NcclApi, checked against the header where the build machine has it.
static_assert(sizeof(ncclUniqueId) == sizeof(vlm::cuda::NcclApi::UniqueId), "ncclUniqueId size");
static_assert(sizeof(ncclResult_t) == sizeof(int) && ncclSuccess == 0, "ncclResult_t");
static_assert(ncclFloat16 == 6 && ncclFloat32 == 7 && ncclBfloat16 == 9 && ncclSum == 0, "NCCL enums");
static_assert(sizeof(ncclComm_t) == sizeof(void*), "ncclComm_t");
#endif

namespace vlm::cuda {
namespace {

// Where Python's nvidia-nccl package may sit: the usual prefixes, then python3 on PATH.
std::vector<std::string> python_nccl_files() {
  std::vector<std::string> files;
  for (const std::string& d : nvidia_package_dirs())
    for (const std::string& f : glob_paths(d + "/nccl/lib/libnccl.so.2")) files.push_back(f);
  return files;
}

struct Loaded {
  NcclApi api;
  bool ok = false;
  std::string why, where;
};

Loaded load() {
  Loaded r;
  // NCCL's cuMem-based P2P transport fails inside one process of several GPUs on the H200 hosts we
  // measured (session 17: "failed to peer with device 1: operation not permitted when stream is
  // capturing", then ncclAllReduce's internal error), where its P2P "direct pointer" transport works
  // over NVLink; so cuMem is off unless the user set NCCL_CUMEM_ENABLE (read at NCCL's init, after this).
  setenv("NCCL_CUMEM_ENABLE", "0", /*overwrite=*/0);
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("VLM_NCCL_LIBRARY"); env != nullptr && *env != '\0') {
    const std::string e(env);
    candidates.push_back(glob_paths(e + "/libnccl.so.2").empty() ? e : e + "/libnccl.so.2");
  }
  candidates.push_back("libnccl.so.2");
  for (const std::string& f : python_nccl_files()) candidates.push_back(f);
  std::string tried;
  for (const std::string& c : candidates) {
    void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      tried += fmt::format(" {} ({})", c, err != nullptr ? err : "not loaded");
      continue;
    }
    NcclApi& a = r.api;
    std::string missing;
    dl_resolve(lib, "ncclGetVersion", a.GetVersion, &missing);
    dl_resolve(lib, "ncclGetErrorString", a.GetErrorString, &missing);
    dl_resolve(lib, "ncclGetUniqueId", a.GetUniqueId, &missing);
    dl_resolve(lib, "ncclCommInitRank", a.CommInitRank, &missing);
    dl_resolve(lib, "ncclCommInitAll", a.CommInitAll, &missing);
    dl_resolve(lib, "ncclCommDestroy", a.CommDestroy, &missing);
    dl_resolve(lib, "ncclAllReduce", a.AllReduce, &missing);
    dl_resolve(lib, "ncclAllGather", a.AllGather, &missing);
    if (!missing.empty()) {
      tried += fmt::format(" {} (lacks{})", c, missing);
      continue;
    }
    a.GetVersion(&a.version);
    r.ok = true;
    r.where = c;
    return r;
  }
  r.why = "libnccl.so.2 not found; looked in (in order):" + tried +
          " (set VLM_NCCL_LIBRARY to the library or its directory, or pip install nvidia-nccl-cu13)";
  return r;
}

int nccl_dtype(DType t) {
  switch (t) {
    case DType::F16: return 6;
    case DType::F32: return 7;
    case DType::BF16: return 9;
    default: throw InternalError(fmt::format("NCCL collective of {}: only F32, BF16 and F16", dtype_name(t)));
  }
}

void check_nccl(const NcclApi& api, NcclApi::Result r, const char* what) {
  if (r != 0) throw DeviceError(fmt::format("{} failed: {} ({})", what, api.GetErrorString(r), r));
}

}  // namespace

const NcclApi* nccl_api(std::string* why, std::string* where) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] {
    loaded = load();
    if (loaded.ok)
      VLM_LOG_INFO("NCCL {}.{}.{} loaded from {}", loaded.api.version / 10000, loaded.api.version / 100 % 100,
                   loaded.api.version % 100, loaded.where);
  });
  if (why != nullptr) *why = loaded.why;
  if (where != nullptr) *where = loaded.where;
  return loaded.ok ? &loaded.api : nullptr;
}

NcclGroup::NcclGroup(const std::vector<int>& devices) : devices_(devices) {
  std::string why;
  api_ = nccl_api(&why);
  if (api_ == nullptr) throw LoadError("tensor parallelism needs NCCL: " + why);
  VLM_CHECK(!devices.empty(), "an NCCL group of no devices");
  comms_.assign(devices.size(), nullptr);
  check_nccl(*api_, api_->CommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
}

NcclGroup::~NcclGroup() {
  for (NcclApi::Comm c : comms_)
    if (c != nullptr) api_->CommDestroy(c);
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclGroup> group, int rank) : group_(std::move(group)), rank_(rank) {
  VLM_CHECK(group_ && rank >= 0 && rank < group_->size(), "NCCL rank {} of {}", rank, group_ ? group_->size() : 0);
}

void NcclCommunicator::all_reduce_sum(void* buf, int64_t count, DType dtype, void* stream) {
  const NcclApi& a = group_->api();
  check_nccl(a, a.AllReduce(buf, buf, static_cast<size_t>(count), nccl_dtype(dtype), /*ncclSum*/ 0, group_->comm(rank_), stream),
             "ncclAllReduce");
}

void NcclCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype, void* stream) {
  const NcclApi& a = group_->api();
  check_nccl(a, a.AllGather(in, out, static_cast<size_t>(count), nccl_dtype(dtype), group_->comm(rank_), stream),
             "ncclAllGather");
}

}  // namespace vlm::cuda
