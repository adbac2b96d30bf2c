// A fixed pool of worker threads for splitting a kernel's output box into tiles. Splitting never
// changes how an element is computed (tiles partition the output, each element is produced by
// one thread with the same operation order), so results do not depend on the thread count.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n), at least `grain` items per chunk,
  // using the calling thread too. Returns when every chunk is done. fn must not throw and must
  // not call parallel_for itself.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool (threads = hardware concurrency, or TESSERA_THREADS).
  static ThreadPool& global();

  // While one lives on a thread, parallel_for on that thread runs the whole range inline: a
  // member of a plan executor's team (backends/cpu/worker_team.h) already has its share.
  class InlineScope {
   public:
    InlineScope() : previous_(inline_only_) { inline_only_ = true; }
    ~InlineScope() { inline_only_ = previous_; }
    InlineScope(const InlineScope&) = delete;
    InlineScope& operator=(const InlineScope&) = delete;

   private:
    bool previous_;
  };

 private:
  static thread_local bool inline_only_;
  void worker_loop();
  void run_chunks(std::unique_lock<std::mutex>& lock);
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time (callers on several threads)
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_size_ = 0, chunk_ = 0, next_ = 0;
  int in_flight_ = 0;  // chunks claimed and not yet finished
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace tessera::cpu
