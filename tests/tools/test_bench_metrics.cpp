// vlm-bench's pieces without a network: the metric math on hand-made timelines (values worked
// out by hand, numpy's percentile rule), the arrival schedule, the SSE stream recorder, the PNG
// encoder and the option parser.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>

#include "tools/vlm-bench/arrival_schedule.h"
#include "tools/vlm-bench/report/bench_metrics.h"
#include "tools/vlm-bench/bench_options.h"
#include "tools/vlm-bench/png_encoder.h"
#include "tools/vlm-bench/stream_recorder.h"

namespace vlm::bench {
namespace {

// A successful streamed request: sent at `start`, first chunk after `ttft`, then `gaps`.
RequestSample timeline(int index, double start, double ttft, std::vector<double> gaps, int output_tokens) {
  RequestSample s;
  s.index = index;
  s.success = true;
  s.http_status = 200;
  s.start_s = s.scheduled_s = start;
  s.ttft_s = s.ttft_content_s = ttft;
  double t = start + ttft;
  s.content_chunk_s.push_back(t);
  for (double g : gaps) {
    t += g;
    s.content_chunk_s.push_back(t);
  }
  s.itl_s = gaps;
  s.e2el_s = t - start;
  s.end_s = t;
  s.output_tokens = output_tokens;
  s.content_chunks = static_cast<int>(s.content_chunk_s.size());
  s.usage_seen = true;
  s.role_chunks = 1;
  s.done_seen = true;
  return s;
}

TEST(BenchMetrics, DescribeMatchesNumpy) {
  // numpy: mean 2.5, median 2.5, std 1.118034, p90 = 3.7, p99 = 3.97, p0 = 1
  const Distribution d = describe({4, 1, 3, 2}, {0, 90, 99});
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.median, 2.5);
  EXPECT_NEAR(d.std, std::sqrt(1.25), 1e-12);
  EXPECT_DOUBLE_EQ(d.percentiles[0].second, 1.0);
  EXPECT_NEAR(d.percentiles[1].second, 3.7, 1e-12);
  EXPECT_NEAR(d.percentiles[2].second, 3.97, 1e-12);
  const Distribution empty = describe({}, {50});
  EXPECT_EQ(empty.count, 0u);
  EXPECT_EQ(empty.mean, 0.0);
  const Distribution one = describe({7}, {99});
  EXPECT_EQ(one.percentiles[0].second, 7.0);
  EXPECT_EQ(one.std, 0.0);
}

TEST(BenchMetrics, TpotNeedsTwoTokens) {
  RequestSample s = timeline(0, 0, 0.1, {0.02, 0.03}, 3);
  ASSERT_TRUE(request_tpot_s(s));
  EXPECT_NEAR(*request_tpot_s(s), 0.025, 1e-12);  // (0.15 - 0.1) / 2
  s.output_tokens = 1;
  EXPECT_FALSE(request_tpot_s(s));
}

TEST(BenchMetrics, SummaryOfHandMadeTimelines) {
  // Two requests over 2 s. A: start 0, TTFT 0.1, gaps 0.1,0.1 (3 tokens, end 0.3).
  // B: start 0.5, TTFT 0.5, gaps 0.25,0.25,0.5 (4 tokens, end 2.0). C: a 500.
  std::vector<RequestSample> v = {timeline(0, 0.0, 0.1, {0.1, 0.1}, 3), timeline(1, 0.5, 0.5, {0.25, 0.25, 0.5}, 4)};
  v[0].prompt_tokens = 10;
  v[1].prompt_tokens = 20;
  RequestSample c;
  c.index = 2;
  c.http_status = 500;
  c.failure_kind = "500";
  c.error = "HTTP 500: boom";
  c.start_s = 0.2;
  c.end_s = 0.25;
  v.push_back(c);
  GoodputSlo slo;
  slo.ttft_ms = 200;  // only A meets it
  const BenchSummary s = summarize(v, {50, 99}, slo);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.failures_by_kind.at("500"), 1);
  ASSERT_EQ(s.first_errors.size(), 1u);
  EXPECT_NE(s.first_errors[0].find("boom"), std::string::npos);
  EXPECT_DOUBLE_EQ(s.duration_s, 2.0);
  EXPECT_EQ(s.total_input_tokens, 30);
  EXPECT_EQ(s.total_output_tokens, 7);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 3.5);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 18.5);
  ASSERT_TRUE(s.request_goodput);
  EXPECT_DOUBLE_EQ(*s.request_goodput, 0.5);
  EXPECT_NEAR(s.ttft_ms.mean, 300, 1e-9);
  EXPECT_NEAR(s.e2el_ms.mean, (300 + 1500) / 2.0, 1e-9);
  EXPECT_NEAR(s.tpot_ms.mean, (100 + 1000.0 / 3) / 2, 1e-9);  // A: 0.2/2, B: 1.0/3
  EXPECT_EQ(s.itl_ms.count, 5u);
  EXPECT_NEAR(s.itl_ms.median, 250, 1e-9);  // {100,100,250,250,500}
  EXPECT_EQ(s.peak_concurrency, 2);          // A [0,0.3), C [0.2,0.25), B [0.5,2)
  // Chunks by second: [0,1): A's 0.1, 0.2, 0.3; [1,2): B's 1.0, 1.25, 1.5; [2,3): B's 2.0.
  EXPECT_EQ(output_tokens_per_second(v), (std::vector<double>{3, 3, 1}));
  EXPECT_DOUBLE_EQ(s.peak_output_tokens_per_s, 3.0);
  EXPECT_EQ(s.usage_missing, 0);
  EXPECT_EQ(s.chunk_count_mismatch, 0);
}

TEST(BenchMetrics, TokensPerSecondSpreadsUsageOverChunks) {
  // 2 chunks but 6 tokens by usage: each chunk carries 3.
  std::vector<RequestSample> v = {timeline(0, 0.0, 0.5, {1.0}, 6)};
  const std::vector<double> b = output_tokens_per_second(v);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_DOUBLE_EQ(b[0], 3.0);
  EXPECT_DOUBLE_EQ(b[1], 3.0);
  const std::vector<double> half = output_tokens_per_second(v, 0.5);  // per-second rates
  ASSERT_EQ(half.size(), 4u);
  EXPECT_DOUBLE_EQ(half[1], 6.0);
  EXPECT_EQ(summarize(v, {50}, {}).chunk_count_mismatch, 1);
}

TEST(BenchMetrics, PeakConcurrencyCountsEndsFirstAtTies) {
  std::vector<RequestSample> v(3);
  v[0].start_s = 0, v[0].end_s = 1;
  v[1].start_s = 1, v[1].end_s = 2;  // starts as the first ends
  v[2].start_s = 1.5, v[2].end_s = 3;
  EXPECT_EQ(peak_concurrency(v), 2);
}

TEST(ArrivalSchedule, InfPoissonAndGamma) {
  for (double t : arrival_schedule(5, 0.0, 1.0, 1)) EXPECT_EQ(t, 0.0);
  for (double burst : {1.0, 0.3, 4.0}) {
    const std::vector<double> t = arrival_schedule(200, 50.0, burst, 9);
    ASSERT_EQ(t.size(), 200u);
    EXPECT_NEAR(t.back(), 200 / 50.0, 1e-9);  // rescaled to N / rate
    for (size_t i = 1; i < t.size(); ++i) EXPECT_GE(t[i], t[i - 1]);
    EXPECT_EQ(t, arrival_schedule(200, 50.0, burst, 9));
    EXPECT_NE(t, arrival_schedule(200, 50.0, burst, 10));
  }
  // Burstier schedules have more variable gaps (coefficient of variation ~ 1/sqrt(shape)).
  auto cv = [](const std::vector<double>& t) {
    std::vector<double> g{t[0]};
    for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
    const Distribution d = describe(g, {});
    return d.std / d.mean;
  };
  EXPECT_GT(cv(arrival_schedule(2000, 10, 0.25, 1)), 1.5);
  EXPECT_LT(cv(arrival_schedule(2000, 10, 16, 1)), 0.5);
}

TEST(StreamRecorder, TimesChunksLikeVllm) {
  StreamRecorder r(3, /*chat=*/true, /*stream=*/true, 1.0, 0.9);
  auto feed = [&](const std::string& s, double t) { r.feed(s.data(), s.size(), 200, t); };
  feed(": ping\n\n", 1.05);  // comment: ignored
  feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\nda", 1.2);
  feed("ta: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\r\n\r\n", 1.3);
  feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"},\"finish_reason\":\"length\"}]}\n\n", 1.5);
  feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", 1.6);
  feed("data: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n", 1.7);
  const RequestSample s = r.finish(200, "", "", 1.8);
  EXPECT_TRUE(s.success) << s.error;
  EXPECT_NEAR(s.ttft_s, 0.2, 1e-12);          // the role chunk has non-empty choices
  EXPECT_NEAR(s.ttft_content_s, 0.3, 1e-12);  // first text
  EXPECT_NEAR(s.e2el_s, 0.5, 1e-12);          // the usage chunk does not count
  ASSERT_EQ(s.itl_s.size(), 2u);
  EXPECT_NEAR(s.itl_s[0], 0.1, 1e-12);
  EXPECT_NEAR(s.itl_s[1], 0.2, 1e-12);
  EXPECT_EQ(s.prompt_tokens, 7);
  EXPECT_EQ(s.output_tokens, 2);
  EXPECT_EQ(s.content_chunks, 2);
  EXPECT_EQ(s.role_chunks, 1);
  EXPECT_TRUE(s.done_seen);
  EXPECT_EQ(s.chunks_after_done, 1);
  EXPECT_EQ(s.text, "Hi there");
}

TEST(StreamRecorder, ErrorsByStatusAndInStream) {
  StreamRecorder a(0, true, true, 0, 0);
  const std::string body = R"({"error":{"message":"queue full","type":"rate_limit_error","code":429}})";
  a.feed(body.data(), body.size(), 429, 0.1);
  RequestSample s = a.finish(429, "", "", 0.1);
  EXPECT_FALSE(s.success);
  EXPECT_EQ(s.failure_kind, "429");
  EXPECT_NE(s.error.find("queue full"), std::string::npos);

  StreamRecorder b(1, false, true, 0, 0);
  const std::string ev = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"error\":{\"message\":\"engine died\"}}\n\ndata: [DONE]\n\n";
  b.feed(ev.data(), ev.size(), 200, 0.2);
  s = b.finish(200, "", "", 0.3);
  EXPECT_EQ(s.failure_kind, "stream_error");
  EXPECT_NE(s.error.find("engine died"), std::string::npos);

  StreamRecorder c(2, true, true, 0, 0);
  s = c.finish(0, "Timeout was reached", "timeout", 5.0);
  EXPECT_EQ(s.failure_kind, "timeout");

  StreamRecorder d(3, true, true, 0, 0);
  d.feed("data: [DONE]\n\n", 14, 200, 0.1);
  EXPECT_EQ(d.finish(200, "", "", 0.1).failure_kind, "no_tokens");
}

TEST(PngEncoder, RoundTripsThroughZlib) {
  const int w = 5, h = 3;
  const std::vector<uint8_t> px = random_image_rgb(w, h, 42);
  EXPECT_EQ(px, random_image_rgb(w, h, 42));
  EXPECT_NE(px, random_image_rgb(w, h, 43));
  const std::string png = encode_png_rgb(px, w, h);
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(static_cast<uint8_t>(png[19]), w);
  EXPECT_EQ(static_cast<uint8_t>(png[23]), h);
  EXPECT_EQ(png.substr(png.size() - 8, 4), "IEND");
  // IHDR's CRC covers type and data.
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  const uint32_t stored = (uint8_t(png[29]) << 24) | (uint8_t(png[30]) << 16) | (uint8_t(png[31]) << 8) | uint8_t(png[32]);
  EXPECT_EQ(crc, stored);
  // IDAT inflates to filter-0 scanlines of the pixels.
  const size_t idat = png.find("IDAT");
  const uint32_t len = (uint8_t(png[idat - 4]) << 24) | (uint8_t(png[idat - 3]) << 16) | (uint8_t(png[idat - 2]) << 8) | uint8_t(png[idat - 1]);
  std::vector<uint8_t> raw((w * 3 + 1) * h);
  uLongf raw_len = raw.size();
  ASSERT_EQ(uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(png.data() + idat + 4), len), Z_OK);
  ASSERT_EQ(raw_len, raw.size());
  for (int y = 0; y < h; ++y) {
    EXPECT_EQ(raw[y * (w * 3 + 1)], 0);
    for (int i = 0; i < w * 3; ++i) EXPECT_EQ(raw[y * (w * 3 + 1) + 1 + i], px[y * w * 3 + i]);
  }
  EXPECT_THROW(encode_png_rgb(px, w + 1, h), std::invalid_argument);
}

TEST(BenchOptions, ParsesAndRejects) {
  const char* ok[] = {"vlm-bench", "--request-rate", "12.5", "--goodput", "ttft:500", "tpot:50", "--percentiles",
                      "50,99.9", "--image-size", "64x32", "--endpoint", "completions", "--prompt-ids"};
  const BenchOptions o = parse_bench_options(13, ok);
  EXPECT_EQ(o.request_rate, 12.5);
  EXPECT_EQ(*o.goodput_ttft_ms, 500);
  EXPECT_EQ(*o.goodput_tpot_ms, 50);
  EXPECT_FALSE(o.goodput_e2el_ms);
  EXPECT_EQ(o.percentiles, (std::vector<double>{50, 99.9}));
  EXPECT_EQ(o.image_width, 64);
  EXPECT_EQ(o.image_height, 32);
  EXPECT_EQ(o.api_path(), "/v1/completions");
  auto bad = [](std::vector<const char*> args) {
    args.insert(args.begin(), "vlm-bench");
    try {
      parse_bench_options(static_cast<int>(args.size()), args.data());
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(bad({"--base-url", "http://example.com"}).find("--allow-remote"), std::string::npos);
  EXPECT_EQ(bad({"--base-url", "http://example.com", "--allow-remote"}), "accepted");
  EXPECT_NE(bad({"--request-rate", "fast"}).find("--request-rate"), std::string::npos);
  EXPECT_NE(bad({"--goodput", "ttfx:3"}).find("ttfx"), std::string::npos);
  EXPECT_NE(bad({"--dataset", "jsonl"}).find("--dataset-path"), std::string::npos);
  EXPECT_NE(bad({"--prompt-ids"}).find("completions"), std::string::npos);
  EXPECT_NE(bad({"--bogus"}).find("unknown option"), std::string::npos);
  EXPECT_TRUE(is_loopback_url("http://localhost:1"));
  EXPECT_TRUE(is_loopback_url("http://127.3.0.1"));
  EXPECT_TRUE(is_loopback_url("http://[::1]:8000/"));
  EXPECT_FALSE(is_loopback_url("http://127.0.0.1.evil.com"));
  EXPECT_FALSE(is_loopback_url("https://10.0.0.1"));
}

}  // namespace
}  // namespace vlm::bench
