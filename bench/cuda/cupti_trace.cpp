// cupti_trace: a GPU timeline of any CUDA program without Nsight Systems (not on the GPU machine):
// an injection library (CUDA_INJECTION64_PATH) that records every kernel, memcpy and memset
// through CUPTI's activity API and writes one line per activity at exit to $CUPTI_TRACE_OUT:
//   K|C|S start_ns end_ns stream name-or-bytes [grid block]
// (K kernel, C memcpy, S memset; GPU timestamps). bench/cuda/cupti_trace_summary.py reads it.
// Build (here or on the GPU machine; CUPTI ships with the CUDA toolkit):
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include bench/cuda/cupti_trace.cpp \
//     -L/usr/local/cuda/lib64 -lcupti -o libcupti_trace.so
// Use: CUPTI_TRACE_OUT=trace.txt CUDA_INJECTION64_PATH=$PWD/libcupti_trace.so PROGRAM ...
// (libcupti.so on LD_LIBRARY_PATH). A measuring aid: no part of the product.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufBytes = 8 << 20;
std::mutex g_mu;
std::vector<std::string> g_lines;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufBytes));
  *size = kBufBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  char line[512];
  std::vector<std::string> out;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      std::snprintf(line, sizeof line, "K %llu %llu %u %s %d %d", static_cast<unsigned long long>(k->start),
                    static_cast<unsigned long long>(k->end), k->streamId, k->name ? k->name : "?", k->gridX * k->gridY * k->gridZ,
                    k->blockX * k->blockY * k->blockZ);
      out.emplace_back(line);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      std::snprintf(line, sizeof line, "C %llu %llu %u %llu", static_cast<unsigned long long>(m->start),
                    static_cast<unsigned long long>(m->end), m->streamId, static_cast<unsigned long long>(m->bytes));
      out.emplace_back(line);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      std::snprintf(line, sizeof line, "S %llu %llu %u %llu", static_cast<unsigned long long>(m->start),
                    static_cast<unsigned long long>(m->end), m->streamId, static_cast<unsigned long long>(m->bytes));
      out.emplace_back(line);
    }
  }
  free(buffer);
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto& l : out) g_lines.push_back(std::move(l));
}

void write_out() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("CUPTI_TRACE_OUT");
  FILE* f = std::fopen(path ? path : "cupti_trace.txt", "w");
  if (!f) return;
  std::lock_guard<std::mutex> lk(g_mu);
  for (const auto& l : g_lines) std::fprintf(f, "%s\n", l.c_str());
  std::fclose(f);
}

}  // namespace

extern "C" int InitializeInjection(void) {
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  std::atexit(write_out);
  return 1;
}
