// Run-time loading of cuDNN 9 (contract in cudnn_library.h).
#include "kernels/cuda/attention/cudnn_library.h"

#include "kernels/cuda/core/dl_library.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace vlm::cuda {
namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// Loads the engine libraries beside the dispatcher (and NVRTC) globally, so that the dispatcher's
// dlopen by soname finds them already loaded.
void preload_siblings(const std::string& dir, const std::vector<std::string>& nvidia_dirs, std::string* log) {
  for (const std::string& nd : nvidia_dirs)
    for (const char* sub : {"/cuda_nvrtc/lib/libnvrtc.so.*", "/cuda_nvrtc/lib/libnvrtc-builtins.so.*", "/cu13/lib/libnvrtc.so.*",
                            "/cu13/lib/libnvrtc-builtins.so.*"})
      for (const std::string& f : glob_paths(nd + sub))
        if (dlopen(f.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) *log += " [preload " + f + ": " + dlerror() + "]";
  for (const char* name : {"libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
                           "libcudnn_heuristic.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9"}) {
    const std::string f = dir + "/" + name;
    if (glob_paths(f).empty()) continue;
    if (dlopen(f.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) *log += " [preload " + f + ": " + dlerror() + "]";
  }
}

struct Loaded {
  CudnnApi api;
  bool ok = false;
  std::string why, where;
};

Loaded load() {
  Loaded r;
  std::vector<std::string> candidates;  // files to dlopen, in order
  if (const char* env = std::getenv("VLM_CUDNN_LIB"); env != nullptr && *env != '\0') {
    const std::string e(env);
    candidates.push_back(glob_paths(e + "/libcudnn.so.9").empty() ? e : e + "/libcudnn.so.9");
  }
  candidates.push_back("libcudnn.so.9");
  const std::vector<std::string> nvidia_dirs = nvidia_package_dirs();
  for (const std::string& d : nvidia_dirs)
    for (const std::string& f : glob_paths(d + "/cudnn/lib/libcudnn.so.9")) candidates.push_back(f);
  std::string report;  // the candidates in order, for the log
  for (const std::string& c : candidates) report += " " + c;
  void* lib = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    if (c.find('/') != std::string::npos) preload_siblings(dir_of(c), nvidia_dirs, &tried);
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib != nullptr) {
      r.where = c;
      if (c.find('/') == std::string::npos) {
        char path[4096] = {0};
        if (dlinfo(lib, RTLD_DI_ORIGIN, path) == 0) r.where = std::string(path) + "/" + c;
      }
      break;
    }
    tried += " [" + c + ": " + dlerror() + "]";
  }
  if (lib == nullptr) {
    r.why = "cuDNN 9 (libcudnn.so.9) not found; tried:" + tried + " (set VLM_CUDNN_LIB to its file or directory)";
    return r;
  }
  CudnnApi& a = r.api;
  std::string missing;
  dl_resolve(lib, "cudnnGetVersion", a.GetVersion, &missing);
  dl_resolve(lib, "cudnnGetErrorString", a.GetErrorString, &missing);
  dl_resolve(lib, "cudnnCreate", a.Create, &missing);
  dl_resolve(lib, "cudnnDestroy", a.Destroy, &missing);
  dl_resolve(lib, "cudnnSetStream", a.SetStream, &missing);
  dl_resolve(lib, "cudnnBackendCreateDescriptor", a.BackendCreateDescriptor, &missing);
  dl_resolve(lib, "cudnnBackendDestroyDescriptor", a.BackendDestroyDescriptor, &missing);
  dl_resolve(lib, "cudnnBackendFinalize", a.BackendFinalize, &missing);
  dl_resolve(lib, "cudnnBackendSetAttribute", a.BackendSetAttribute, &missing);
  dl_resolve(lib, "cudnnBackendGetAttribute", a.BackendGetAttribute, &missing);
  dl_resolve(lib, "cudnnBackendExecute", a.BackendExecute, &missing);
  std::string optional;
  dl_resolve(lib, "cudnnGetLastErrorString", a.GetLastErrorString, &optional);
  if (!missing.empty()) {
    r.why = r.where + " lacks:" + missing;
    return r;
  }
  const size_t v = a.GetVersion();
  if (v < 90000) {
    r.why = r.where + " is cuDNN " + std::to_string(v) + "; 9.0 or newer is needed";
    return r;
  }
  r.ok = true;
  r.why = "candidates:" + report + (tried.empty() ? "" : "; loaded after:" + tried);
  return r;
}

}  // namespace

std::string CudnnApi::describe(Status s) const {
  std::string out = (GetErrorString != nullptr ? GetErrorString(s) : "cuDNN status") + std::string(" (") +
                    std::to_string(s) + ")";
  if (GetLastErrorString != nullptr) {
    char msg[2048] = {0};
    GetLastErrorString(msg, sizeof msg);
    if (msg[0] != '\0') out += ": " + std::string(msg);
  }
  return out;
}

const CudnnApi* cudnn_api(std::string* why, std::string* where) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (why != nullptr) *why = loaded.why;
  if (where != nullptr) *where = loaded.where;
  return loaded.ok ? &loaded.api : nullptr;
}

}  // namespace vlm::cuda
