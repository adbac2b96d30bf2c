#include "engine/memory_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "engine/error.h"
#include "engine/session.h"

namespace tessera {

namespace {

constexpr size_t kAlign = 64;

std::byte* aligned_new(int64_t bytes, size_t align, const char* what) {
  MemoryPool::check_allocatable(bytes, what);
  try {
    return static_cast<std::byte*>(::operator new[](static_cast<size_t>(std::max<int64_t>(bytes, 1)), std::align_val_t(align)));
  } catch (const std::bad_alloc&) {
    throw Error(absl::StrCat("[pool] out of memory allocating ", bytes, " bytes for ", what));
  }
}

void aligned_delete(std::byte* p, size_t align) { ::operator delete[](p, std::align_val_t(align)); }

}  // namespace

MemoryPool::MemoryPool(MemoryPoolOptions options) : options_(options) {}

void MemoryPool::check_allocatable(int64_t bytes, const char* what) {
  static const int64_t physical = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  if (bytes > physical)
    throw Error(absl::StrCat("[pool] ", bytes, " bytes for ", what, " exceed the machine's memory (", physical,
                             " bytes)"));
}

MemoryPool::~MemoryPool() {
  release_devices();
  if (arena_ != nullptr) aligned_delete(arena_, kAlign);
  weights_.clear();
}

PoolStats MemoryPool::stats() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  PoolStats s = stats_;
  s.sessions = static_cast<int64_t>(sessions_.size());
  return s;
}

// Adds `delta` bytes to the figure of `use` (pinned values count as kept too).
void MemoryPool::account(Use use, int64_t delta) {
  switch (use) {
    case Use::Pinned: stats_.pinned_bytes += delta; [[fallthrough]];
    case Use::Kept: stats_.kept_bytes += delta; break;
    case Use::Input: stats_.input_bytes += delta; break;
    case Use::Weight: stats_.weight_bytes += delta; break;
  }
}

// Node values (kept values: K/V caches among them) go into transparent huge pages
// (kernels/huge_pages.h): from kHugeBufferMin bytes on each gets its own, from kSlabMin they share
// them (HugePageSlabs); the pool counts the bytes asked for (a rounding up to a whole huge page
// adds at most a third, a slab block less than kSlabUnit).
bool MemoryPool::in_slabs(int64_t bytes) { return bytes >= kSlabMin && bytes < kHugeBufferMin; }

std::byte* MemoryPool::allocate(int64_t bytes, Use use, const char* what) {
  check_allocatable(bytes, what);
  std::byte* p = in_slabs(bytes) ? slabs_.take(bytes) : huge_buffer_new(bytes);
  if (p == nullptr) throw Error(absl::StrCat("[pool] out of memory allocating ", bytes, " bytes for ", what));
  stats_.allocations += 1;
  stats_.current_bytes += bytes;
  account(use, bytes);
  note_peak();
  return p;
}

void MemoryPool::release(std::byte* data, int64_t bytes, Use use) {
  if (data == nullptr) return;
  if (in_slabs(bytes)) slabs_.give(data, bytes);
  else huge_buffer_delete(data, bytes);
  stats_.current_bytes -= bytes;
  account(use, -bytes);
}

void MemoryPool::move_use(int64_t bytes, Use from, Use to) {
  if (from == to) return;
  account(from, -bytes);
  account(to, bytes);
}

std::byte* MemoryPool::arena(int64_t bytes) {
  if (bytes > arena_bytes_) {
    std::byte* grown = aligned_new(bytes, kAlign, "the transient arena");
    if (arena_ != nullptr) aligned_delete(arena_, kAlign);
    stats_.current_bytes += bytes - arena_bytes_;
    stats_.transient_bytes = bytes;
    stats_.allocations += 1;
    arena_ = grown;
    arena_bytes_ = bytes;
    note_peak();
  }
  return arena_;
}

std::shared_ptr<const void> MemoryPool::hot_weight(const void* data, int64_t bytes) {
  if (!options_.huge_page_weights || bytes < options_.min_weight_bytes) return nullptr;
  if (auto it = weights_.find(data); it != weights_.end()) return it->second;
  check_allocatable(bytes, "huge-page weight memory");
  const HugePageChunks::Block block = weight_chunks_.take(bytes);
  if (block.data == nullptr)
    throw Error(absl::StrCat("[pool] out of memory allocating ", bytes, " bytes for huge-page weight memory"));
  if (block.new_chunk_bytes > 0) {
    stats_.allocations += 1;
    stats_.current_bytes += block.new_chunk_bytes;
    account(Use::Weight, block.new_chunk_bytes);
  }
  std::memcpy(block.data.get(), data, static_cast<size_t>(bytes));
  // Held by the pool (and by the graphs using the copy): the chunk lives while any copy in it does.
  std::shared_ptr<const void> held = block.data;
  weights_.emplace(data, held);
  return held;
}

void MemoryPool::note_peak() {
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.kept_bytes + stats_.transient_bytes);
}

// Pins first, then every session's candidates by score, best first, while they fit.
void MemoryPool::rank() {
  std::vector<GraphSession::KeepCandidate> candidates;
  int64_t used = 0;
  for (GraphSession* s : sessions_) s->collect_candidates(candidates, used);
  std::sort(candidates.begin(), candidates.end(),
            [](const GraphSession::KeepCandidate& a, const GraphSession::KeepCandidate& b) { return a.score > b.score; });
  for (const GraphSession::KeepCandidate& c : candidates) {
    const bool keep = options_.budget_bytes < 0 || used + c.bytes <= options_.budget_bytes;
    if (keep) used += c.bytes;
    c.session->apply_kept(c.node, keep);
  }
}

}  // namespace tessera
