#include "kernels/cpu/thread_pool.h"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

using tessera::cpu::ThreadPool;

TEST_CASE("kernels: parallel_for covers every item exactly once, call after call") {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 7, 64, 1000}) {
    for (int64_t grain : {1, 5, 2000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
        CHECK(begin < end);
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (const auto& h : hits) CHECK(h.load() == 1);
    }
  }
}

TEST_CASE("kernels: parallel_for returns only after every claimed chunk has finished") {
  ThreadPool pool(2);
  for (int round = 0; round < 200; ++round) {
    std::atomic<int64_t> done{0};
    pool.parallel_for(8, 1, [&](int64_t begin, int64_t end) {
      if (begin % 2 == 1) std::this_thread::yield();
      done.fetch_add(end - begin);
    });
    REQUIRE(done.load() == 8);
  }
}

TEST_CASE("kernels: parallel_for may be called from several threads at once") {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int i = 0; i < 50; ++i)
        pool.parallel_for(16, 1, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
    });
  for (std::thread& t : callers) t.join();
  CHECK(total.load() == 3 * 50 * 16);
}
