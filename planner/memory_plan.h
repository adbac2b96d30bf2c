// Pass "memory_plan": places the transient outputs of a plan's steps in one arena.
//
// A transient value (a node the cache policy does not keep) lives from the step that computes it
// to the last step that reads it (the read's target lives to the end: its box is copied out).
// Buffers are placed greedily in step order into the smallest free block that fits (ggml's
// allocator works the same way); a block is freed after its last reader. An elementwise step
// whose input dies at that step and has the same dtype and extent writes in place over it; so
// does a reshape whose box is the same run of linear indices as its dying input's (the same
// bytes: its kernel then moves nothing).
// Offsets are multiples of 64 bytes; sizes come from bucketed extents so that one plan serves
// every read of its pattern.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/graph.h"

namespace tessera {

struct BufferRequest {
  NodeId node;
  int64_t bytes = 0;         // 0: the node is kept (its own buffer), nothing to place
  int32_t last_use = -1;     // index of the last step reading it; >= number of steps: the end
  int32_t in_place_of = -1;  // index of an earlier step whose buffer it may take over
};

struct BufferPlacement {
  int64_t offset = -1;  // bytes into the arena; -1 when kept
  bool in_place = false;
};

struct MemoryPlan {
  std::vector<BufferPlacement> placements;  // one per request
  int64_t arena_bytes = 0;
  int64_t in_place_steps = 0;
};

MemoryPlan plan_memory(std::span<const BufferRequest> requests);

}  // namespace tessera
