#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace tessera::cpu {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("TESSERA_THREADS")) return std::max(1, std::atoi(env));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }());
  return pool;
}

// Runs chunks of the current job while any are left. Called with `lock` held; returns with it
// held. A chunk is claimed and finished under the lock, so once next_ reaches job_size_ and
// in_flight_ is 0 no thread touches the job again.
void ThreadPool::run_chunks(std::unique_lock<std::mutex>& lock) {
  while (job_ != nullptr && next_ < job_size_) {
    const std::function<void(int64_t, int64_t)>& job = *job_;
    const int64_t begin = next_;
    const int64_t end = std::min(job_size_, begin + chunk_);
    next_ = end;
    ++in_flight_;
    lock.unlock();
    job(begin, end);
    lock.lock();
    if (--in_flight_ == 0 && next_ >= job_size_) done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    run_chunks(lock);
  }
}

thread_local bool ThreadPool::inline_only_ = false;

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (inline_only_ || workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  const int64_t chunks =
      std::min<int64_t>(static_cast<int64_t>(size()) * 4, (n + grain - 1) / grain);
  std::lock_guard<std::mutex> call(call_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  job_size_ = n;
  chunk_ = (n + chunks - 1) / chunks;
  next_ = 0;
  ++generation_;
  wake_.notify_all();
  run_chunks(lock);
  // Wait only for chunks other threads have claimed: a worker that has not woken up yet (on a
  // busy machine it may wait a whole time slice) finds no work left and never delays the caller.
  done_.wait(lock, [&] { return in_flight_ == 0; });
  job_ = nullptr;
}

}  // namespace tessera::cpu
