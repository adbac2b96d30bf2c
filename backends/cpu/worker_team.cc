#include "backends/cpu/worker_team.h"

#include <algorithm>
#include <cstdlib>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

constexpr int kSpins = 4000;  // about 10-40 us of polling before sleeping

void relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Polls `word` up to `polls` times (a pause between polls); true once it differs from `seen`.
bool poll_changed(const std::atomic<uint32_t>& word, uint32_t seen, int polls) {
  for (int i = 0; i < polls; ++i) {
    if (word.load(std::memory_order_acquire) != seen) return true;
    relax();
  }
  return false;
}

}  // namespace

int WorkerTeam::default_size() {
  if (const char* env = std::getenv("TESSERA_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return std::min(n, 256);
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::shared_ptr<WorkerTeam> WorkerTeam::shared(int threads) {
  static std::mutex mutex;
  static std::vector<std::weak_ptr<WorkerTeam>> teams;  // by size - 1, grown on demand
  threads = std::max(1, threads);
  std::lock_guard<std::mutex> lock(mutex);
  if (teams.size() < static_cast<size_t>(threads)) teams.resize(static_cast<size_t>(threads));
  std::weak_ptr<WorkerTeam>& slot = teams[static_cast<size_t>(threads - 1)];
  std::shared_ptr<WorkerTeam> team = slot.lock();
  if (team == nullptr) {
    team = std::make_shared<WorkerTeam>(threads);
    slot = team;
  }
  return team;
}

WorkerTeam::WorkerTeam(int threads) : size_(std::max(1, threads)) {
  for (int m = 1; m < size_; ++m) threads_.emplace_back([this, m] { member_loop(m); });
}

WorkerTeam::~WorkerTeam() {
  stop_.store(true);
  generation_.fetch_add(1);
  doorbell_.fetch_add(1);
  doorbell_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerTeam::wait_until_changed(const std::atomic<uint32_t>& word, uint32_t seen) {
  if (poll_changed(word, seen, kSpins)) return;
  while (word.load(std::memory_order_acquire) == seen) word.wait(seen, std::memory_order_acquire);
}

void WorkerTeam::wait_at_least(const std::atomic<uint32_t>& count, uint32_t target) {
  for (int i = 0; i < kSpins; ++i) {
    if (count.load(std::memory_order_acquire) >= target) return;
    relax();
  }
  for (uint32_t seen = count.load(std::memory_order_acquire); seen < target;
       seen = count.load(std::memory_order_acquire))
    count.wait(seen, std::memory_order_acquire);
}

void WorkerTeam::run(const std::function<void(int)>& fn) {
  if (size_ == 1) {
    fn(0);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  job_ = &fn;
  running_.store(size_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  doorbell_.fetch_add(1, std::memory_order_acq_rel);
  doorbell_.notify_all();
  fn(0);
  // Wait for the others to leave the job (they may still be between their last barrier and return).
  for (int i = 0; running_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < kSpins) relax();
    else std::this_thread::yield();
  }
  job_ = nullptr;
}

void WorkerTeam::wake() {
  if (size_ == 1) return;
  const int64_t until = now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(kWakeWindow).count();
  // Members already polling see the later deadline; sleeping ones are woken by the bell.
  if (awake_until_.load(std::memory_order_relaxed) >= until - 100'000) return;  // rung < 0.1 ms ago
  awake_until_.store(until, std::memory_order_relaxed);
  doorbell_.fetch_add(1, std::memory_order_acq_rel);
  doorbell_.notify_all();
}

void WorkerTeam::member_loop(int member) {
  // Generation 0 is the state before any run: a member that starts late must still see the
  // first run's bump.
  uint32_t seen = 0;
  int64_t polled_until = 0;  // kWakeWindow past the end of this member's last job
  while (true) {
    // Poll (kSpins, then on until awake_until_ or kWakeWindow past the end of this member's last
    // job), then sleep on the doorbell; ringing it (run(), wake()) starts the polling again.
    // Polling on after a job keeps a member awake between the runs of a stream of reads (decode
    // steps ~2.5 ms apart): waking a sleeping one cost the caller's wake() ~25 us a decode step
    // on a shared VM (the futex syscall), planning per SmolLM2-135M decode step 2 threads
    // 102-104 -> 75-78 us. The bell is read before the generation: a run started
    // after that read has rung it, so the sleep returns at once.
    while (true) {
      bool started = poll_changed(generation_, seen, kSpins);
      while (!started && now_ns() < std::max(polled_until, awake_until_.load(std::memory_order_relaxed)))
        started = poll_changed(generation_, seen, 64);
      if (started) break;
      const uint32_t bell = doorbell_.load(std::memory_order_acquire);
      if (generation_.load(std::memory_order_acquire) != seen) break;
      doorbell_.wait(bell, std::memory_order_acquire);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(member);
    polled_until = now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(kWakeWindow).count();
    running_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void WorkerTeam::barrier() {
  if (size_ == 1) return;
  const uint32_t phase = phase_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    phase_.fetch_add(1, std::memory_order_acq_rel);
    phase_.notify_all();
    return;
  }
  wait_until_changed(phase_, phase);
}

}  // namespace tessera::cpu
