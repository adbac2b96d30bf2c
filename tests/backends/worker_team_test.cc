// WorkerTeam (backends/cpu/worker_team.h): persistent members that run a job together, sleep
// between runs, and are woken early by wake(); and how a host team's members claim a launch's
// tiles (backends/cpu/host_plan.h).
#include "backends/cpu/worker_team.h"
#include "backends/cpu/host_plan.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace tessera;
using namespace std::chrono_literals;

namespace {

// Runs one job on the team and checks that every member ran it exactly once.
void run_once(cpu::WorkerTeam& team) {
  std::vector<std::atomic<int>> calls(static_cast<size_t>(team.size()));
  team.run([&](int member) { calls[static_cast<size_t>(member)].fetch_add(1); });
  for (int m = 0; m < team.size(); ++m) CHECK(calls[static_cast<size_t>(m)].load() == 1);
}

}  // namespace

TEST_CASE("worker team: every member runs each job once, whether its members poll or sleep") {
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    cpu::WorkerTeam team(threads);
    for (int i = 0; i < 200; ++i) run_once(team);  // back to back: members still polling
    // Long enough for the members to stop polling and sleep on the doorbell.
    std::this_thread::sleep_for(5ms);
    run_once(team);
    // wake() and a run inside its window; then a run after the window has passed.
    team.wake();
    std::this_thread::sleep_for(200us);
    run_once(team);
    team.wake();
    std::this_thread::sleep_for(cpu::WorkerTeam::kWakeWindow + 5ms);
    run_once(team);
    // wake() from another thread while runs go on.
    std::atomic<bool> stop{false};
    std::thread waker([&] {
      while (!stop.load()) {
        team.wake();
        std::this_thread::sleep_for(50us);
      }
    });
    for (int i = 0; i < 100; ++i) run_once(team);
    stop.store(true);
    waker.join();
  }
}

TEST_CASE("worker team: a team whose members sleep, or were just woken, is destroyed without hanging") {
  {
    cpu::WorkerTeam team(3);
    run_once(team);
    std::this_thread::sleep_for(5ms);  // members asleep
  }
  {
    cpu::WorkerTeam team(2);
    team.wake();  // members polling, no run
  }
  {
    cpu::WorkerTeam team(2);  // never ran
  }
  CHECK(true);
}

TEST_CASE("worker team: a launch's tiles claimed from both ends go to one claim each") {
  // One at a time, in a fixed mix of ends: the front hands out 0, 1, ..., the back total - 1,
  // total - 2, ..., and once every tile is taken each further claim gets `total`.
  for (uint32_t total = 1; total <= 20; ++total) {
    CAPTURE(total);
    std::atomic<uint64_t> claimed{0};
    std::vector<int> times(total, 0);
    uint32_t next_front = 0, next_back = total - 1;
    for (uint32_t i = 0; i < total; ++i) {
      const bool back = (i * 7 + total) % 3 == 0;
      const uint32_t t = host::claim_tile(claimed, total, back);
      REQUIRE(t < total);
      CHECK(t == (back ? next_back-- : next_front++));
      times[t] += 1;
    }
    for (int k = 0; k < 4; ++k) CHECK(host::claim_tile(claimed, total, k % 2 == 0) == total);
    CHECK(host::claimed_tiles(claimed.load()) == total + 4);
    for (uint32_t t = 0; t < total; ++t) CHECK(times[t] == 1);
  }
  // More tiles than a 16-bit half could count: the halves never carry into each other.
  {
    const uint32_t total = 200000;
    std::atomic<uint64_t> claimed{0};
    std::vector<uint8_t> times(total, 0);
    for (uint32_t i = 0; i < total; ++i) {
      const uint32_t t = host::claim_tile(claimed, total, i % 3 == 0);
      REQUIRE(t < total);
      times[t] += 1;
    }
    CHECK(host::claim_tile(claimed, total, false) == total);
    CHECK(host::claim_tile(claimed, total, true) == total);
    CHECK(std::count(times.begin(), times.end(), uint8_t{1}) == total);
  }
  // Concurrently: one thread from the back, two from the front.
  for (uint32_t total : {1u, 2u, 3u, 8u, 33u, 512u}) {
    CAPTURE(total);
    for (int round = 0; round < 50; ++round) {
      std::atomic<uint64_t> claimed{0};
      std::vector<std::atomic<int>> times(total);
      std::vector<std::thread> threads;
      for (int m = 0; m < 3; ++m)
        threads.emplace_back([&, m] {
          for (uint32_t t = host::claim_tile(claimed, total, m == 0); t < total; t = host::claim_tile(claimed, total, m == 0))
            times[t].fetch_add(1);
        });
      for (std::thread& t : threads) t.join();
      for (uint32_t t = 0; t < total; ++t) CHECK(times[t].load() == 1);
    }
  }
}
