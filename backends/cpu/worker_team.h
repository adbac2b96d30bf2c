// WorkerTeam: persistent threads that execute a plan in one parallel region (as ggml computes a
// graph). run() wakes the team once; inside, every member walks the same steps, each kernel call
// takes the member's share of the step (KernelArgs::thread_index / thread_count), and barrier()
// separates dependent steps. Waiting spins briefly, then sleeps (std::atomic::wait, a futex):
// on a shared 2-core machine pure spinning collapses when another process holds a core.
//
// Results never depend on the team size: kernels compute each element the same way whatever
// share of a box they are given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

class WorkerTeam {
 public:
  // threads >= 1 members; the calling thread of run() is member 0.
  explicit WorkerTeam(int threads);
  ~WorkerTeam();
  WorkerTeam(const WorkerTeam&) = delete;
  WorkerTeam& operator=(const WorkerTeam&) = delete;

  int size() const { return size_; }
  // Runs fn(member) on every member and returns when all have returned. fn must not throw.
  // One run at a time: concurrent callers (sessions on different pools sharing the team) wait.
  void run(const std::function<void(int)>& fn);
  // Inside fn, by every member: returns once all members have called it.
  void barrier();
  // A run is coming soon: sleeping members wake now and poll for it for up to kWakeWindow
  // (a sleeping member takes ~50 us to wake on a shared VM; a decode step's planning, between
  // this call and run(), takes ~100 us). Any thread; cheap when they are awake already.
  void wake();
  // How long members poll after a wake(), and after each job of theirs ends, before sleeping.
  static constexpr std::chrono::microseconds kWakeWindow{1000};
  // Returns once `count` >= target: spins briefly, then sleeps until a notify_all on `count`.
  static void wait_at_least(const std::atomic<uint32_t>& count, uint32_t target);

  // The team size a session gets by default: TESSERA_THREADS, else the hardware's cores.
  static int default_size();
  // The process's team of `threads` members, shared by every backend that asks for that size
  // (so N sessions do not start N sets of threads); it lives while someone holds it.
  static std::shared_ptr<WorkerTeam> shared(int threads);

 private:
  void member_loop(int member);
  static void wait_until_changed(const std::atomic<uint32_t>& word, uint32_t seen);

  int size_;
  std::mutex run_mutex_;  // one run at a time
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};  // bumped by run() to start the members
  // Sleeping members sleep on the doorbell, rung by run() and wake(); after wake() they poll
  // until awake_until_ (steady-clock nanoseconds).
  std::atomic<uint32_t> doorbell_{0};
  std::atomic<int64_t> awake_until_{0};
  std::atomic<int> running_{0};          // members still inside the current job
  std::atomic<bool> stop_{false};
  // Barrier: arrivals count up to size_, the last one bumps the phase.
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> phase_{0};
};

}  // namespace tessera::cpu
