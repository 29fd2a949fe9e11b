// A hand-written SVG report of one run, three panels side by side: the TTFT CDF, the ITL CDF
// (both in ms) and output tokens per second over the run (bucketed). Opens in any browser.
#pragma once

#include <string>
#include <vector>

#include "tools/vlm-bench/report/bench_metrics.h"

namespace vlm::bench {

// title: shown at the top (model, endpoint, rate). Returns the SVG document.
std::string render_svg_report(const std::vector<RequestSample>& samples, const std::string& title);

// Throws std::runtime_error naming the file when it cannot be written.
void write_svg_report(const std::string& path, const std::vector<RequestSample>& samples, const std::string& title);

}  // namespace vlm::bench
