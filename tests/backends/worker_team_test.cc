// WorkerTeam (backends/cpu/worker_team.h): persistent members that run a job together, sleep
// between runs, and are woken early by wake().
#include "backends/cpu/worker_team.h"

#include <doctest/doctest.h>

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
