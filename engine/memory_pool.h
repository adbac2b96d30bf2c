// MemoryPool: the memory of any number of GraphSessions (over different graphs: a text encoder,
// a transformer and a VAE; two LLMs), under one byte budget.
//
// - Kept values (node values that stay valid between reads) of every session on the pool compete
//   for one budget. Which ones stay is decided across sessions by recomputation cost saved per
//   byte, learned from the reads each session saw and from optional hints per input (see
//   InputHint in engine/session.h); Keep::Always pins count first. Evicting a value only
//   shrinks its valid region to nothing: correctness never depends on the pool.
// - Transient values of a read live in one arena at offsets the plan's memory plan chose. Reads
//   of the sessions on one pool are serialised (the pool's lock), so one arena, grown to the
//   largest plan any of them ran, serves all: peak memory is the largest working set plus the
//   budget, not the sum over sessions.
// - Hot weights (matmul/linear weights of at least `min_weight_bytes`) are copied once into
//   transparent-huge-page memory (`madvise(MADV_HUGEPAGE)`: file mappings never get huge pages)
//   and shared by every session on the pool that uses the same weight; other constants stay
//   where they are (memory-mapped files). Node values of 1.5 MiB or more (a long context's K/V
//   caches) get huge pages of their own (huge_buffer_new in kernels/huge_pages.h); those of
//   64 KiB to 1.5 MiB (a layer's K/V cache at a shorter context) share huge pages (HugePageSlabs).
// - Every buffer the pool hands out is counted: a warm decode step allocates nothing.
// - Backends are the pool's: sessions on one pool asking for the same backend (name and thread
//   count) share one instance, so a device's constants are uploaded once and shared by every
//   session on the pool that runs on that device (engine/memory_pool_device.cc).
//
// Thread-safe: any number of threads may use sessions on one pool; their operations run one at
// a time (a session's public calls hold the pool's lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "kernels/huge_pages.h"

namespace tessera {

class GraphSession;

struct PoolStats {
  int64_t current_bytes = 0;    // everything held now: kept + transient + inputs + weights
  int64_t kept_bytes = 0;       // computed node values kept between reads (what the budget bounds)
  int64_t pinned_bytes = 0;     // of kept_bytes: Keep::Always values (kept even over budget)
  int64_t transient_bytes = 0;  // the arena of transient values
  int64_t input_bytes = 0;      // input buffers (fixed capacity, zero-filled)
  int64_t weight_bytes = 0;     // huge-page weight copies and folded constants
  int64_t peak_bytes = 0;       // largest kept + transient seen (the budgeted working memory)
  int64_t evictions = 0;        // kept values dropped by the policy (any session)
  int64_t allocations = 0;      // buffers allocated so far (counted for "no allocation once warm")
  int64_t sessions = 0;
  int64_t device_weight_bytes = 0;  // constants uploaded to device backends (once per device)
};

struct MemoryPoolOptions {
  // Bytes of kept values over all sessions; -1: no limit.
  int64_t budget_bytes = -1;
  // Copy hot weights into huge-page memory once (shared by the pool's sessions).
  bool huge_page_weights = true;
  int64_t min_weight_bytes = int64_t{1} << 16;
};

class MemoryPool {
 public:
  explicit MemoryPool(MemoryPoolOptions options = {});
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;
  static std::shared_ptr<MemoryPool> create(MemoryPoolOptions options = {}) {
    return std::make_shared<MemoryPool>(options);
  }

  PoolStats stats() const;
  const MemoryPoolOptions& options() const { return options_; }

  enum class Use : uint8_t { Kept, Pinned, Input, Weight };

  // Throws Error "[pool] ..." when `bytes` exceed the machine's physical memory: such a buffer
  // can never be allocated (or would be killed for memory), so it fails before touching memory.
  static void check_allocatable(int64_t bytes, const char* what);

 private:
  friend class GraphSession;
  // All below: the caller holds mutex_.
  std::byte* allocate(int64_t bytes, Use use, const char* what);
  void release(std::byte* data, int64_t bytes, Use use);
  void move_use(int64_t bytes, Use from, Use to);
  void account(Use use, int64_t delta);
  std::byte* arena(int64_t bytes);  // at least `bytes` of transient arena (grows, never shrinks)
  // The huge-page copy of a weight (made once per pool), or nullptr when not copied.
  std::shared_ptr<const void> hot_weight(const void* data, int64_t bytes);
  void note_peak();
  // Global keep decision over every session (see the header comment).
  void rank();
  // The pool's backend of this key, made by `make` on first use.
  std::shared_ptr<Backend> backend(const std::string& key, absl::FunctionRef<std::unique_ptr<Backend>()> make);
  // The device copy of a constant on `backend` (one of the pool's), uploaded on first use: the
  // whole constant, dense, as a one-dimensional region. `uploaded` gets the bytes copied now.
  absl::StatusOr<BufferHandle> device_constant(Backend& backend, const void* data, int64_t bytes, int64_t& uploaded);
  void release_devices();

  MemoryPoolOptions options_;
  mutable std::recursive_mutex mutex_;  // recursive: releasing a folded constant may happen under it
  PoolStats stats_;
  std::byte* arena_ = nullptr;
  int64_t arena_bytes_ = 0;
  std::vector<GraphSession*> sessions_;
  absl::flat_hash_map<const void*, std::shared_ptr<const void>> weights_;
  HugePageChunks weight_chunks_;  // where the weight copies are placed
  HugePageSlabs slabs_;           // node values of kSlabMin to kHugeBufferMin bytes
  static bool in_slabs(int64_t bytes);
  absl::flat_hash_map<std::string, std::shared_ptr<Backend>> backends_;
  absl::flat_hash_map<std::pair<const Backend*, const void*>, BufferHandle> device_constants_;
};

}  // namespace tessera
