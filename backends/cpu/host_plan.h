// What the host backend's two source files share (backends/cpu/host_backend.cc: buffers,
// plans, one thread; host_team.cc: a team's run): a prepared plan's steps and the cuts of a
// launch's boxes into tiles. Internal to backends/cpu.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "kernels/view.h"

namespace tessera::host {

struct HostStep {
  KernelFn kernel = nullptr;
  const Node* node = nullptr;  // in the graph given to prepare (which outlives the plan)
  const void* constant_data = nullptr;
  const void* prepared = nullptr;  // prepare_node's data (KernelNode::prepared)
  int64_t cost = 1;  // work per output element (the reduction depth of matmul-like ops)
  int split_from = 0;  // the outermost axis tile_of prefers to cut
  int split_unit = 1;  // cuts of that axis fall on multiples of this (absolute coordinates)
  int64_t kv_heads = 0, q_heads = 0;  // attention: its K/V and query heads (0 for other ops; see run())
  bool causal = true;                  // attention: its mask
  int64_t window = 0;
  // Attention: the keys [first, last) query position t sees, of `keys` (the non-causal end).
  std::pair<int64_t, int64_t> visible_keys(int64_t t, int64_t keys) const {
    if (!causal) return {0, keys};
    return {window > 0 ? std::max<int64_t>(0, t - window + 1) : 0, t + 1};
  }
  // The weight bytes a linear streams from memory (its packed weight, or its constant weight
  // when nothing was prepared); empty for other steps. Waiting team members read ahead into
  // them (HostBackend::read_ahead).
  const char* stream = nullptr;
  int64_t stream_bytes = 0;
  // The first step of a group (group_size > 1): steps [this, this + group_size) run as one call
  // of `group` when their launches allow it (groupable()).
  GroupKernelFn group = nullptr;
  int group_size = 1;
  AttentionPhases phases;  // attention: its kernel's phases (a team's decode steps), if any
};

// At most this many consecutive linears form a group (q, k and v: three; gate and up: two).
constexpr int kMaxGroup = 4;
// Group launches of at most this many x rows (the box's volume over its last axis). A group
// streams its members' weights once per chunk of rows, one after the other: with a decode
// step's one row that makes q, k and v (or gate and up) one stream of back-to-back packed
// weights, one x quantisation, one launch; with a prefill's many rows each member's weights
// are read again for every chunk, and a group's together may not stay in cache between chunks.
constexpr int64_t kGroupRows = 16;

class HostPreparedPlan final : public PreparedPlan {
 public:
  std::vector<HostStep> steps;
  int64_t member_scratch = 0;  // bytes per member (a multiple of 64)
  int members = 1;             // team size the scratch was sized for
  int64_t shared_scratch = 0;  // bytes after the members' (a team's attention phases)
};

// Tile `tile` of `tiles` of a group member's box (host_backend.cc).
Box group_tile(const Box& box, int tile, int tiles);
// Whether launches [j, j + count) (consecutive steps of one group) can run as one group call.
bool groupable(std::span<const StepLaunch> launches, size_t j, int count);
// A launch's tiles are claimed from both ends of one counter (host_team.cc: why): its low 32
// bits count the claims from the first tile up, its high 32 bits those from the last tile down
// (neither half can carry into the other: a launch has fewer than 2^32 tiles, and each member
// claims at most once past the last). claimed_tiles: the claims a counter value holds.
// claim_tile: the next tile from that end, or `total` once every tile is taken; each tile goes to
// exactly one claim.
uint64_t claimed_tiles(uint64_t counter);
uint32_t claim_tile(std::atomic<uint64_t>& claimed, uint32_t total, bool from_back);
// The least extent of axis d a tile takes.
int64_t min_tile_extent(int d, int rank, int split_from, int split_unit);
// Tile `member` of `members` of `box`, cut along its outermost axis with room.
Box tile_of(const Box& box, int member, int members, int split_from, int split_unit);

}  // namespace tessera::host
