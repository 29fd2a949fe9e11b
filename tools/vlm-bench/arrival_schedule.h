// When each request of a run is sent, as offsets in seconds from the start of the run.
// rate <= 0 ("inf"): every request at t = 0. Otherwise gaps are gamma distributed with shape
// `burstiness` and mean 1/rate (burstiness 1 = Poisson arrivals), and, as `vllm bench serve`
// does, the cumulative schedule is rescaled so the last request goes out at exactly N/rate.
#pragma once

#include <cstdint>
#include <vector>

namespace vlm::bench {

// Precondition: burstiness > 0. Deterministic for a given seed (on one standard library).
std::vector<double> arrival_schedule(int num_requests, double rate, double burstiness, uint64_t seed);

}  // namespace vlm::bench
