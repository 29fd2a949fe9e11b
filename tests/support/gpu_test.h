// GPU tests skip, with the reason, where no CUDA device is visible (CI has nvcc but no GPU).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/core/cuda_check.h"

#define VLM_REQUIRE_GPU()                                                          \
  do {                                                                             \
    std::string vlm_why_;                                                          \
    if (::vlm::cuda::visible_gpus(&vlm_why_) == 0)                                 \
      GTEST_SKIP() << "no GPU visible (" << vlm_why_ << "): GPU test skipped";     \
  } while (0)
