// cuDNN 9 loaded at run time (dlopen), so that the binaries need no libcudnn to start and the GPU
// machine's cuDNN (a system install or the one in Python's nvidia-cudnn package) is found where it
// is. Only the backend (graph) API entry points that CudnnAttention uses are resolved.
//
// Search order for libcudnn.so.9: $VLM_CUDNN_LIB (a file or a directory), the dynamic loader's path
// (LD_LIBRARY_PATH, ldconfig), then site-packages/nvidia/cudnn/lib of the usual Python prefixes
// and of `python3` on PATH; the first that loads is used. When found in a directory, its sibling
// libcudnn_*.so.9 (the engine libraries) and NVRTC from site-packages/nvidia/cuda_nvrtc/lib are
// loaded first, RTLD_GLOBAL, so the dispatcher's own dlopen of them succeeds without
// LD_LIBRARY_PATH.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace vlm::cuda {

// Signatures of the cuDNN entry points, spelled without cuDNN's headers (opaque handles, int
// enums); cudnn_library.cpp checks them against the headers where those exist.
struct CudnnApi {
  using Status = int;  // cudnnStatus_t; 0 = CUDNN_STATUS_SUCCESS
  using Desc = void*;  // cudnnBackendDescriptor_t
  using Handle = void*;  // cudnnHandle_t
  size_t (*GetVersion)() = nullptr;
  const char* (*GetErrorString)(Status) = nullptr;
  void (*GetLastErrorString)(char*, size_t) = nullptr;  // null before cuDNN 9.0
  Status (*Create)(Handle*) = nullptr;
  Status (*Destroy)(Handle) = nullptr;
  Status (*SetStream)(Handle, void* stream) = nullptr;
  Status (*BackendCreateDescriptor)(int type, Desc*) = nullptr;
  Status (*BackendDestroyDescriptor)(Desc) = nullptr;
  Status (*BackendFinalize)(Desc) = nullptr;
  Status (*BackendSetAttribute)(Desc, int attr, int type, int64_t count, const void* values) = nullptr;
  Status (*BackendGetAttribute)(Desc, int attr, int type, int64_t requested, int64_t* count, void* values) = nullptr;
  Status (*BackendExecute)(Handle, Desc plan, Desc variant_pack) = nullptr;

  // "CUDNN_STATUS_... (code): <last error message>" for a failed call.
  std::string describe(Status s) const;
};

// The process-wide cuDNN, loaded on first call (thread-safe). Null when not found; *why (if not
// null) then says what was tried; when loaded, *why lists the candidates in search order (and
// any that failed to load first). `where` receives the path loaded from.
const CudnnApi* cudnn_api(std::string* why = nullptr, std::string* where = nullptr);

}  // namespace vlm::cuda
