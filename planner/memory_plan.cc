#include "planner/memory_plan.h"

#include <algorithm>
#include <map>

namespace tessera {

namespace {

constexpr int64_t kAlign = 64;

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Free blocks of the arena keyed by offset; adjacent blocks merge.
class FreeList {
 public:
  int64_t take(int64_t bytes, int64_t& arena_end) {
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->second >= bytes && (best == blocks_.end() || it->second < best->second)) best = it;
    if (best == blocks_.end()) {
      // Grow the arena; a free block touching the end is extended rather than left behind.
      if (!blocks_.empty()) {
        auto last = std::prev(blocks_.end());
        if (last->first + last->second == arena_end) {
          const int64_t offset = last->first;
          blocks_.erase(last);
          arena_end = offset + bytes;
          return offset;
        }
      }
      const int64_t offset = arena_end;
      arena_end += bytes;
      return offset;
    }
    const int64_t offset = best->first, size = best->second;
    blocks_.erase(best);
    if (size > bytes) blocks_.emplace(offset + bytes, size - bytes);
    return offset;
  }
  void give(int64_t offset, int64_t bytes) {
    auto [it, inserted] = blocks_.emplace(offset, bytes);
    if (auto next = std::next(it); next != blocks_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        blocks_.erase(it);
      }
    }
  }

 private:
  std::map<int64_t, int64_t> blocks_;
};

}  // namespace

MemoryPlan plan_memory(std::span<const BufferRequest> requests) {
  MemoryPlan plan;
  const int32_t n = static_cast<int32_t>(requests.size());
  plan.placements.assign(requests.size(), BufferPlacement{});
  // Sizes actually reserved (an in-place buffer inherits its donor's block).
  std::vector<int64_t> reserved(requests.size(), 0);
  std::vector<std::vector<int32_t>> dies_at(requests.size());
  for (int32_t i = 0; i < n; ++i)
    if (requests[i].bytes > 0 && requests[i].last_use < n) dies_at[static_cast<size_t>(requests[i].last_use)].push_back(i);
  FreeList free;
  for (int32_t i = 0; i < n; ++i) {
    const BufferRequest& r = requests[static_cast<size_t>(i)];
    if (r.bytes > 0) {
      const int32_t donor = r.in_place_of;
      if (donor >= 0 && donor < i && requests[static_cast<size_t>(donor)].last_use == i &&
          reserved[static_cast<size_t>(donor)] >= align_up(r.bytes)) {
        plan.placements[static_cast<size_t>(i)] = {plan.placements[static_cast<size_t>(donor)].offset, true};
        reserved[static_cast<size_t>(i)] = reserved[static_cast<size_t>(donor)];
        reserved[static_cast<size_t>(donor)] = 0;  // handed over: not freed at this step
        plan.in_place_steps += 1;
      } else {
        reserved[static_cast<size_t>(i)] = align_up(r.bytes);
        plan.placements[static_cast<size_t>(i)].offset = free.take(reserved[static_cast<size_t>(i)], plan.arena_bytes);
      }
    }
    for (int32_t dead : dies_at[static_cast<size_t>(i)])
      if (reserved[static_cast<size_t>(dead)] > 0) {
        free.give(plan.placements[static_cast<size_t>(dead)].offset, reserved[static_cast<size_t>(dead)]);
        reserved[static_cast<size_t>(dead)] = 0;
      }
  }
  return plan;
}

}  // namespace tessera
