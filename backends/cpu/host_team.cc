// A host backend's run on a team of threads (HostBackend::run_team; the one-thread run and
// everything else are in host_backend.cc): tiles per launch, claimed by the members from both
// ends, a decode attention in its two phases, and waiting members reading ahead into the
// weights.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "backends/cpu/host_backend.h"
#include "backends/cpu/host_plan.h"

namespace tessera {

using host::HostPreparedPlan;
using host::HostStep;
using host::group_tile;
using host::groupable;
using host::min_tile_extent;
using host::tile_of;
using host::claim_tile;
using host::claimed_tiles;

namespace {

// A launch with less work than this is one tile: cutting it would cost more in waiting for
// the tiles than it saves.
constexpr int64_t kSplitWork = int64_t{1} << 15;

// Tiles a launch of `work` (elements x work per element) whose largest box is `box` is cut
// into: one below kSplitWork; else up to kTilesPerMember per member (members claim them as they
// finish, so one the OS deschedules delays the launch by a tile, not by a share), fewer where
// the preferred axes have no room for 4 steps per tile (a conv cut into a few rows per tile
// would pack its halo rows again for each), and a multiple of the members (3 tiles on 2
// members take as long as 4).
constexpr int kTilesPerMember = 4;

int tile_count(const Box& box, int64_t work, int members, int split_from, int split_unit) {
  if (work < kSplitWork || box.rank() == 0) return 1;
  const int rank = box.rank();
  auto has_room = [&](int tiles) {
    for (int d = std::min(split_from, rank - 1); d < rank; ++d)
      if (box.extent(d) >= tiles * min_tile_extent(d, rank, split_from, split_unit)) return true;
    return false;
  };
  int tiles = static_cast<int>(
      std::clamp<int64_t>(work / kSplitWork, members, int64_t{members} * kTilesPerMember));
  while (tiles > members && !has_room(tiles)) --tiles;
  return tiles / members * members;
}

// How far past the start of the next streaming launch a waiting member reads ahead: the lines
// wait in its L2 (1 MiB on Zen 4, 2 MiB on Sapphire Rapids) and the shared L3 until the
// streaming launch's tiles read them. SmolLM2-135M int8 decode with 2 threads (a 553 KB matrix
// per MLP linear) took 1.5-2% less time per token reading 512 KiB ahead, 5-7% with 1 or 2 MiB,
// ~5% with 4 MiB, when only the next streaming launch was read (steps alternating with and
// without in one process); reading on into the launches after it, 2.5-6.6% (int8) and ~10%
// (the f32 path, SmolLM2 and Gemma-3).
constexpr int64_t kReadAheadBytes = 2 << 20;

// A team of more members than K/V heads runs an attention launch in its phases
// (AttentionPhases) when it is one box of one query position with at least this many visible
// keys: its scores cut into a tile of keys per member, then its values into a part of the
// columns per member. Cut along its heads instead (the fused kernel's tiles), every member would
// read and convert all of the keys and values for only its share of the query heads (Gemma-3:
// 4 query heads over one K/V head). Gemma-3-270M int8 decode, f16 K/V, 2 threads: a
// sliding-window layer's attention (512 keys) took 17.8-18.7 us a step in phases against
// 25-41 us as one tile (member 0's, the others reading ahead), the global layers at context
// 1024 31-37 us against 44-76 (the machine's bandwidth moving in between); at context 128 7.8
// against 13 us, with tokens/s within noise (the others read ahead less), hence the threshold.
// With as many K/V heads as members (SmolLM2-135M: 3 over 2 or 3 members) the heads cut took
// the same time at context 1024 (26.7-28.3 us against 26.1-29.6) and less at 128 (5.5-6.0
// against 8.1-8.3: two waits more per phase).
constexpr int64_t kPhasedKeys = 256;

bool runs_in_phases(const HostStep& step, const StepLaunch& launch, int members) {
  if (!step.phases || step.kv_heads >= members || launch.boxes.size() != 1 || launch.inputs.size() < 3) return false;
  const Box& box = launch.boxes[0];
  const int rank = box.rank();
  if (rank < 3 || box.empty()) return false;
  for (int d = 0; d + 2 < rank; ++d)
    if (box.extent(d) != 1) return false;
  const auto [first, last] = step.visible_keys(box.begin(rank - 3), launch.inputs[1].shape[static_cast<size_t>(rank - 3)]);
  return last - first >= kPhasedKeys;
}

// Part `tile` of `tiles` of a one-position attention box for its values phase: a cut of its
// columns at multiples of 16 (each member then reads its columns of every value and runs every
// head's softmax; cutting the heads instead took 13.3 us per member against 11.2 on Gemma-3-270M
// decode at context 1024 with 2 threads: each member read all of the values).
Box values_part(const Box& box, int tile, int tiles) {
  const int col = box.rank() - 1;
  const int64_t begin = box.begin(col), extent = box.extent(col);
  auto cut = [&](int k) {
    if (k == 0 || k == tiles) return begin + extent * k / tiles;
    return std::clamp<int64_t>(begin + (extent * k / tiles + 8) / 16 * 16, begin, begin + extent);
  };
  Box part = box;
  part[col] = Interval(cut(tile), cut(tile + 1));
  return part;
}

}  // namespace

// Which member runs which tile: member 0 claims a launch's tiles from its last one down, the
// other members from its first one up, so the two ends meet wherever the work balances (a
// member the OS deschedules still holds up the others by one tile at most). With two members
// each keeps its end of every launch, which is likely why it pays: the member that waited
// through the light steps before a linear (member 1) read the start of its weights ahead into
// its own caches (read_ahead) and then computes that start, where claims from one end would
// hand member 0 every other tile, their lines then fetched from the other core; and a conv's
// member computes the rows beside those it computed in the conv before. On the Zen 5 host, 2
// threads, runs alternating between claims from one end and from both: SmolLM2-135M int8
// decode (`llm_bench --decode-only`, f16 K/V) 359-375 -> 381-402 tokens/s at context 128 and
// 272-283 -> 283-296 at 1024, prefill 2858-2912 -> 3013-3161 tokens/s (128 tokens) and
// 2651-2692 -> 2782-2808 (512); Gemma-3-270M decode within noise (its output projection streams
// at the read rate either way); `convnet_bench --threads 2 --rounds 2 --no-peer` (ms, best run,
// two alternations): TAEF2 encoder full 16.7-17.0 -> 15.8, edit 3.6-3.7 -> 3.4, decoder 16.4
// -> 14.5, RDN x2 38.1-38.3 -> 37.3-37.5.
namespace host {

uint64_t claimed_tiles(uint64_t counter) { return (counter & 0xffffffffu) + (counter >> 32); }

uint32_t claim_tile(std::atomic<uint64_t>& claimed, uint32_t total, bool from_back) {
  const uint64_t before = claimed.fetch_add(from_back ? uint64_t{1} << 32 : 1, std::memory_order_relaxed);
  if (claimed_tiles(before) >= total) return total;
  return static_cast<uint32_t>(from_back ? total - 1 - (before >> 32) : before & 0xffffffffu);
}

}  // namespace host

// A member that claims a values tile waits for the scores tiles, which were all claimed before
// it by members that are running them (a phased launch's claims all go from its first tile
// up), so it never waits for a tile that no member has reached.
absl::Status HostBackend::run_phase(const PreparedPlan& prepared, const StepLaunch& launch, uint32_t tile,
                                    uint32_t score_tiles, const LaunchTiles& tiles, std::span<std::byte> scratch,
                                    float* shared) const {
  const HostStep& step = static_cast<const HostPreparedPlan&>(prepared).steps[static_cast<size_t>(launch.step)];
  KernelNode node(*step.node);
  node.constant_data = step.constant_data;
  node.prepared = step.prepared;
  const Box& box = launch.boxes[0];
  if (tile < score_tiles)
    return step.phases.scores(KernelArgs{node, launch.inputs, launch.out, box, scratch}, static_cast<int>(tile),
                              static_cast<int>(score_tiles), shared);
  cpu::WorkerTeam::wait_at_least(tiles.done, score_tiles);
  const Box part = values_part(box, static_cast<int>(tile - score_tiles), static_cast<int>(tiles.total - score_tiles));
  if (part.empty()) return absl::OkStatus();
  return step.phases.values(KernelArgs{node, launch.inputs, launch.out, part, scratch}, shared);
}

absl::Status HostBackend::run_team(const PreparedPlan& prepared, std::span<const StepLaunch> launches,
                                   std::span<std::byte> scratch) {
  const auto* plan = static_cast<const HostPreparedPlan*>(&prepared);
  auto slice = [&](int member) {
    return scratch.subspan(static_cast<size_t>(plan->member_scratch * member), static_cast<size_t>(plan->member_scratch));
  };
  if (team_ == nullptr) team_ = cpu::WorkerTeam::shared(threads_);
  const int members = team_->size();
  if (tiles_capacity_ < launches.size()) {
    tiles_capacity_ = std::max(launches.size(), 2 * tiles_capacity_);
    tiles_ = std::make_unique<LaunchTiles[]>(tiles_capacity_);
  }
  // Per launch: the launches its call runs (a group's first: its members; 0 for the members
  // after it, which have no tiles of their own), and the launch before it that has tiles.
  group_count_.assign(launches.size(), 1);
  score_tiles_.assign(launches.size(), 0);
  previous_.assign(launches.size(), kNoLaunch);
  size_t last_with_tiles = kNoLaunch;
  for (size_t j = 0; j < launches.size(); ++j) {
    const HostStep& step = plan->steps[static_cast<size_t>(launches[j].step)];
    tiles_[j].claimed.store(0, std::memory_order_relaxed);
    tiles_[j].done.store(0, std::memory_order_relaxed);
    previous_[j] = last_with_tiles;
    if (group_count_[j] == 0 || launches[j].boxes.empty()) {  // a group's later member, or nothing to run
      tiles_[j].total = 0;
      continue;
    }
    if (step.group_size > 1 && groupable(launches, j, step.group_size)) {
      group_count_[j] = step.group_size;
      for (size_t m = j + 1; m < j + static_cast<size_t>(step.group_size); ++m) group_count_[m] = 0;
      stats_.grouped_launches += step.group_size - 1;
    }
    // The work of the launches this call runs.
    int64_t elements = 0;
    Box widest = Box::of_rank(0);
    for (size_t m = j; m < j + static_cast<size_t>(group_count_[j]); ++m)
      for (const Box& box : launches[m].boxes) {
        elements += box.volume();
        if (widest.rank() == 0 || box.volume() > widest.volume()) widest = box;
      }
    last_with_tiles = j;
    int tiles = tile_count(widest, elements * step.cost, members, step.split_from, step.split_unit);
    // A decode step's attention (too few query rows to cut) is cut along its heads: a member
    // then reads and converts the keys and values of every K/V head its heads use, for only its
    // share of the query heads. With fewer K/V heads than members (Gemma-3: one) every member
    // converts all of them; when that buys each member only two query heads or fewer, the
    // attention is one tile (member 0's) while the others read ahead (Gemma-3-270M, 4 query
    // heads, 2 threads, decode steps alternating the two ways in one process: 0.6-1.7% less
    // time per step with one tile, at context 128 and 1024; more heads were not measured).
    if (step.kv_heads > 0 && step.kv_heads < members && step.q_heads <= 2 * members && widest.rank() >= 3 &&
        widest.extent(widest.rank() - 3) < int64_t{members} * min_tile_extent(widest.rank() - 3, widest.rank(), step.split_from, step.split_unit))
      tiles = 1;
    // Such an attention over enough keys runs in its two phases instead (kPhasedKeys).
    if (group_count_[j] == 1 && runs_in_phases(step, launches[j], members)) {
      score_tiles_[j] = static_cast<uint32_t>(members);
      tiles = 2 * members;
      ++stats_.phased_launches;
    }
    tiles_[j].total = static_cast<uint32_t>(tiles);
    stats_.launches += group_count_[j];
  }
  // For read_ahead: each launch's first streaming launch at or after it, and the bytes streamed
  // by the launches before each.
  next_stream_.resize(launches.size() + 1);
  streamed_before_.resize(launches.size() + 1);
  next_stream_[launches.size()] = launches.size();
  for (size_t j = launches.size(); j-- > 0;)
    next_stream_[j] = plan->steps[static_cast<size_t>(launches[j].step)].stream_bytes > 0 ? j : next_stream_[j + 1];
  streamed_before_[0] = 0;
  for (size_t j = 0; j < launches.size(); ++j)
    streamed_before_[j + 1] = streamed_before_[j] + plan->steps[static_cast<size_t>(launches[j].step)].stream_bytes;
  float* const shared = plan->shared_scratch > 0
                            ? reinterpret_cast<float*>(scratch.data() + plan->member_scratch * members)
                            : nullptr;
  std::atomic<size_t> failed{launches.size()};
  std::mutex error_mutex;
  absl::Status first_error;
  if (launch_times_ != nullptr) launch_times_->assign(launches.size(), 0.0);
  team_->run([&](int member) {
    auto last = std::chrono::steady_clock::now();  // member 0's start of the launch (launch_times_)
    ReadCursor cursor{launches.size(), nullptr};
    for (size_t j = 0; j < launches.size(); ++j) {
      LaunchTiles& launch_tiles = tiles_[j];
      const uint32_t total = launch_tiles.total;
      // A group's later members run in its first member's call.
      if (total == 0) continue;
      // A one-tile launch is member 0's: a chain of light steps stays on one core (its data in
      // that core's caches, no hand-over between cores), while the others read ahead.
      if (total == 1 && member != 0) continue;
      // Every tile of the previous launch with tiles is done (so, by induction, of every earlier
      // launch); a member with nothing to do meanwhile reads ahead into the coming weights.
      const size_t previous = previous_[j];
      if (previous != kNoLaunch && claimed_tiles(launch_tiles.claimed.load(std::memory_order_relaxed)) < total) {
        read_ahead(*plan, launches, j, tiles_[previous], cursor);
        cpu::WorkerTeam::wait_at_least(tiles_[previous].done, tiles_[previous].total);
      }
      if (member == 0 && launch_times_ != nullptr && previous != kNoLaunch) {
        const auto now = std::chrono::steady_clock::now();
        (*launch_times_)[previous] = std::chrono::duration<double>(now - last).count();
        last = now;
      }
      // Member 0 claims from the last tile down, the others from the first up (claim_tile);
      // a phased attention's tiles are claimed in order (run_phase).
      const bool from_back = member == 0 && score_tiles_[j] == 0;
      auto claim = [&] { return claim_tile(launch_tiles.claimed, total, from_back); };
      for (uint32_t t = claim(); t < total; t = claim()) {
        if (failed.load(std::memory_order_acquire) > j) {
          absl::Status status =
              score_tiles_[j] > 0 ? run_phase(prepared, launches[j], t, score_tiles_[j], launch_tiles, slice(member), shared)
              : group_count_[j] > 1
                  ? run_group(prepared, launches, j, group_count_[j], static_cast<int>(t), static_cast<int>(total), slice(member))
                  : run_launch(prepared, launches[j], static_cast<int>(t), static_cast<int>(total), slice(member));
          if (!status.ok()) {
            std::lock_guard<std::mutex> lock(error_mutex);
            if (j < failed.load()) {
              failed.store(j, std::memory_order_release);
              first_error = status;
            }
          }
        }
        // Counted even after a failure, so that no member waits forever (a phased launch's values
        // tiles wait for its scores tiles: run_phase).
        const uint32_t done = launch_tiles.done.fetch_add(1, std::memory_order_acq_rel) + 1;
        if (done == total || done == score_tiles_[j]) launch_tiles.done.notify_all();
      }
    }
    if (member == 0 && launch_times_ != nullptr && last_with_tiles != kNoLaunch) {
      const LaunchTiles& final_tiles = tiles_[last_with_tiles];
      cpu::WorkerTeam::wait_at_least(final_tiles.done, final_tiles.total);
      (*launch_times_)[last_with_tiles] = std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count();
    }
  });
  if (failed.load() < launches.size()) {
    last_failed_step_ = launches[failed.load()].step;
    return first_error;
  }
  return absl::OkStatus();
}

// Reads (plain loads: software prefetches issued by the waiting member measured no gain) the
// weights of the streaming launches from launch j's next one on, up to kReadAheadBytes past its
// start, continuing from where this member's cursor stopped, until `previous` is done.
void HostBackend::read_ahead(const PreparedPlan& prepared, std::span<const StepLaunch> launches, size_t j,
                             const LaunchTiles& previous, ReadCursor& cursor) const {
  const auto& plan = static_cast<const HostPreparedPlan&>(prepared);
  const size_t n = launches.size(), first = next_stream_[j];
  if (first == n) return;
  auto step = [&](size_t launch) -> const HostStep& { return plan.steps[static_cast<size_t>(launches[launch].step)]; };
  if (cursor.launch < first || cursor.launch >= n) cursor = {first, step(first).stream};
  uint64_t sum = 0;
  while (previous.done.load(std::memory_order_acquire) < previous.total) {
    const HostStep& s = step(cursor.launch);
    const char* end = s.stream + s.stream_bytes;
    if (cursor.at >= end) {
      const size_t next = next_stream_[cursor.launch + 1];
      if (next == n) break;
      cursor = {next, step(next).stream};
      continue;
    }
    if (streamed_before_[cursor.launch] - streamed_before_[first] + (cursor.at - s.stream) >= kReadAheadBytes) break;
    for (const char* stop = cursor.at + std::min<std::ptrdiff_t>(512, end - cursor.at); cursor.at < stop; cursor.at += 64)
      sum += *reinterpret_cast<const volatile uint8_t*>(cursor.at);
  }
  asm volatile("" : : "r"(sum));
}

}  // namespace tessera
