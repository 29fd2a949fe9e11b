// DeviceError: the compute device failed (a CUDA error: VLM_CUDA_CHECK raises it). An
// InternalError, so every existing handler still catches it, but apart because the device's
// state is unknown afterwards: the engine ends its requests and stops (EngineLoop), and
// vlm-server exits non-zero for an orchestrator to restart it (docs/RELIABILITY.md, "When the
// device fails"). The fourth tier beside check.h's three.
#pragma once

#include "kernels/core/check.h"

namespace vlm {

class DeviceError : public InternalError {
 public:
  using InternalError::InternalError;
};

}  // namespace vlm
