// EngineLoop: the engine on its own thread, requests from several threads, readers that go away,
// a bounded queue, shutdown.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/engine_loop.h"
#include "tests/engine/engine_test_util.h"

namespace vlm::testing {
namespace {

const std::string kModel = "llama_tiny";

std::unique_ptr<EngineLoop> make_loop(EngineConfig c = test_config()) {
  return std::make_unique<EngineLoop>(make_engine(kModel, c));
}

RequestResult read_all(RequestHandle& h) {
  RequestResult r;
  while (auto ev = h.channel().pop_for(std::chrono::seconds(30))) {
    r.num_events++;
    ChoiceResult& c = r.choices[ev->index];
    c.tokens.insert(c.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    if (ev->finish_reason != FinishReason::None) c.finish = ev->finish_reason;
    if (ev->error) r.error = ev->error;
    if (ev->usage) r.usage = ev->usage;
    r.done = ev->done;
    if (r.done) break;
  }
  return r;
}

// Waits until pred() holds (the engine thread catches up) or 10 s pass.
// Holds the engine thread inside a notify callback until released (deterministic interleaving).
class Gate {
 public:
  std::function<void()> hold_first_event() {
    return [this] {
      std::unique_lock<std::mutex> lock(mu_);
      if (held_) return;
      held_ = true;
      cv_.wait_for(lock, std::chrono::seconds(10), [&] { return open_; });
    };
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, open_ = false;
};

template <typename P>
bool eventually(P pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

TEST(EngineLoop, RequestsFromSeveralThreadsGetTheirOwnTokens) {
  auto loop = make_loop();
  const Reference ref = load_reference(kModel);
  std::vector<std::thread> threads;
  std::vector<RequestResult> results(8);
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < 8; i += 2) {
        RequestHandle h = loop->submit(
            greedy_request("r" + std::to_string(i), ref.ids(i % 4), static_cast<int>(ref.greedy(i % 4).size())));
        results[i] = read_all(h);
      }
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(results[i].done) << i;
    EXPECT_EQ(results[i].choices.at(0).tokens, ref.greedy(i % 4)) << i;
  }
  EXPECT_TRUE(eventually([&] { return loop->stats().num_requests == 0; }));
  EXPECT_EQ(loop->stats().num_free_kv_blocks, loop->stats().num_kv_blocks);
  EXPECT_EQ(loop->stats().num_integrity_failures, 0);
}

TEST(EngineLoop, DroppingTheReaderCancelsTheRequest) {
  auto loop = make_loop();
  const Reference ref = load_reference(kModel);
  Gate gate;  // the engine waits after the first token until the reader is gone
  {
    RequestHandle h = loop->submit(greedy_request("long", ref.ids(3), 300), gate.hold_first_event());
    ASSERT_TRUE(h.next());  // the first token
  }  // reader gone
  gate.open();
  EXPECT_TRUE(eventually([&] {
    const EngineStats s = loop->stats();
    return s.num_requests == 0 && s.num_requests_finished[static_cast<int>(FinishReason::Abort)] == 1;
  }));
  const EngineStats s = loop->stats();
  EXPECT_LE(s.num_generation_tokens, 2);
  EXPECT_EQ(s.num_free_kv_blocks, s.num_kv_blocks);
}

TEST(EngineLoop, BadRequestsThrowAtSubmit) {
  auto loop = make_loop();
  try {
    loop->submit(greedy_request("x", {1, 2, 3}, 10000));
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
  }
}

TEST(EngineLoop, AFullQueueRefusesWith429) {
  EngineConfig c = test_config();
  c.scheduler.max_num_seqs = 1;
  c.scheduler.max_waiting = 1;
  auto loop = make_loop(c);
  Gate gate;  // the engine thread waits after the first token: the queue cannot drain
  RequestHandle running = loop->submit(greedy_request("running", {1, 2, 3}, 400), gate.hold_first_event());
  ASSERT_TRUE(running.next());  // admitted and decoding
  RequestHandle waiting = loop->submit(greedy_request("waiting", {1, 2, 3}, 4));
  try {
    loop->submit(greedy_request("third", {1, 2, 3}, 4));
    FAIL() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 429);
  }
  running.cancel();
  gate.open();
  const RequestResult w = read_all(waiting);
  EXPECT_EQ(w.choices.at(0).tokens.size(), 4u);
}

TEST(EngineLoop, StopEndsLiveRequestsWith503) {
  auto loop = make_loop();
  RequestHandle h = loop->submit(greedy_request("a", {1, 2, 3}, 400));
  ASSERT_TRUE(h.next());
  loop->stop();
  const RequestResult r = read_all(h);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->status, 503);
  EXPECT_TRUE(r.done);
  try {
    loop->submit(greedy_request("b", {1, 2, 3}, 4));
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 503);
  }
}

}  // namespace
}  // namespace vlm::testing
