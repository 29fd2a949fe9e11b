// Finding and opening NVIDIA's run-time libraries that we dlopen rather than link (cuDNN,
// kernels/cuda/attention/cudnn_library.h; NCCL, kernels/cuda/core/nccl_communicator.h): the files a
// glob pattern names, the directories of Python's nvidia-* packages (a stock CUDA image with PyTorch
// carries cuDNN and NCCL there), and resolving a symbol into a typed function pointer.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace vlm::cuda {

// The paths matching pattern (glob(3)), in glob's order; none when nothing matches.
std::vector<std::string> glob_paths(const std::string& pattern);

// Directories ".../site-packages/nvidia" (and dist-packages) of the usual Python prefixes, then of
// python3 on PATH (its sysconfig purelib); possibly repeated, possibly absent on disk.
std::vector<std::string> nvidia_package_dirs();

// fn = the symbol name of lib; when absent, appends " name" to *missing and returns false.
template <class F>
bool dl_resolve(void* lib, const char* name, F& fn, std::string* missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) *missing += std::string(" ") + name;
  return fn != nullptr;
}

}  // namespace vlm::cuda
