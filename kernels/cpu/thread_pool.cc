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

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  while (true) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (next_ < job_size_) {
      int64_t begin = next_;
      int64_t end = std::min(job_size_, begin + chunk_);
      next_ = end;
      lock.unlock();
      (*job_)(begin, end);
      lock.lock();
    }
    if (--pending_ == 0) done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(static_cast<int64_t>(size()) * 4, (n + grain - 1) / grain);
  std::lock_guard<std::mutex> call(call_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  job_size_ = n;
  chunk_ = (n + chunks - 1) / chunks;
  next_ = 0;
  pending_ = static_cast<int>(workers_.size()) + 1;
  ++generation_;
  wake_.notify_all();
  while (next_ < job_size_) {
    int64_t begin = next_;
    int64_t end = std::min(job_size_, begin + chunk_);
    next_ = end;
    lock.unlock();
    fn(begin, end);
    lock.lock();
  }
  if (--pending_ > 0) done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

}  // namespace tessera::cpu
