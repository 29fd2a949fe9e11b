// env_switch: an on/off environment variable (the knobs that switch an optimized path off for a
// comparison, e.g. VLM_CUDA_PREFILL_CUDNN=0). Unset: `fallback`; 0 / off / false / no: false;
// 1 / on / true / yes: true (either case); anything else: `fallback`.
#pragma once

#include <cstdlib>
#include <string>

namespace vlm {

inline bool env_switch(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr) return fallback;
  const std::string v(e);
  if (v == "0" || v == "off" || v == "false" || v == "no" || v == "OFF" || v == "FALSE" || v == "NO") return false;
  if (v == "1" || v == "on" || v == "true" || v == "yes" || v == "ON" || v == "TRUE" || v == "YES") return true;
  return fallback;
}

}  // namespace vlm
