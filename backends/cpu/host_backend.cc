#include "backends/cpu/host_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/prefetch.h"

namespace tessera {

namespace {

constexpr std::align_val_t kAlignment{64};

struct HostStep {
  KernelFn kernel = nullptr;
  const Node* node = nullptr;  // in the graph given to prepare (which outlives the plan)
  const void* constant_data = nullptr;
  const void* prepared = nullptr;  // prepare_node's data (KernelNode::prepared)
  int64_t cost = 1;  // work per output element (the reduction depth of matmul-like ops)
  int split_from = 0;  // the outermost axis tile_of prefers to cut
  int split_unit = 1;  // cuts of that axis fall on multiples of this (absolute coordinates)
  int64_t kv_heads = 0, q_heads = 0;  // attention: its K/V and query heads (0 for other ops; see run())
  bool causal = true;                  // attention: its mask (prefetch_kv)
  int64_t window = 0;
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

// Tile `tile` of `tiles` of a group member's box: a cut of its last axis at multiples of 64
// (absolute coordinates), so that every member's tile keeps the group's x rows (tile_of may
// cut members of different widths along different axes).
Box group_tile(const Box& box, int tile, int tiles) {
  if (tiles <= 1) return box;
  const int last = box.rank() - 1;
  const int64_t begin = box.begin(last), extent = box.extent(last);
  auto cut = [&](int k) {
    if (k == 0 || k == tiles) return begin + extent * k / tiles;
    const int64_t at = (begin + extent * k / tiles + 32) / 64 * 64;
    return std::clamp<int64_t>(at, begin, begin + extent);
  };
  Box part = box;
  part[last] = Interval(cut(tile), cut(tile + 1));
  return part;
}

// Whether launches [j, j + count) (consecutive steps of one group) can run as one group call:
// one non-empty box each, of at most kGroupRows rows, the same on every axis but the last.
bool groupable(std::span<const StepLaunch> launches, size_t j, int count) {
  if (j + static_cast<size_t>(count) > launches.size()) return false;
  const StepLaunch& lead = launches[j];
  if (lead.boxes.size() != 1 || lead.boxes[0].empty()) return false;
  const Box& box = lead.boxes[0];
  const int last = box.rank() - 1;
  if (last < 0 || box.volume() / box.extent(last) > kGroupRows) return false;
  for (int m = 1; m < count; ++m) {
    const StepLaunch& member = launches[j + static_cast<size_t>(m)];
    if (member.step != lead.step + m || member.boxes.size() != 1 || member.boxes[0].empty() ||
        !same_rows(member.boxes[0], box))
      return false;
  }
  return true;
}

// How far past the start of the next streaming launch a waiting member reads ahead: the lines
// wait in its L2 (1 MiB on Zen 4, 2 MiB on Sapphire Rapids) and the shared L3 until the
// streaming launch's tiles read them. SmolLM2-135M int8 decode with 2 threads (a 553 KB matrix
// per MLP linear) took 1.5-2% less time per token reading 512 KiB ahead, 5-7% with 1 or 2 MiB,
// ~5% with 4 MiB, when only the next streaming launch was read (steps alternating with and
// without in one process); reading on into the launches after it, 2.5-6.6% (int8) and ~10%
// (the f32 path, SmolLM2 and Gemma-3).
constexpr int64_t kReadAheadBytes = 2 << 20;

// With one thread, the start of a decode attention's keys and values (which the weight stream
// of the layer before evicted to memory) is fetched into L2 when the last streaming launch
// before it starts: the lines arrive while that launch and the light steps after it (reshapes,
// rope, the casts into the cache) run, instead of stalling the attention's first key blocks.
// At most this many bytes of each of K and V: SmolLM2-135M at context 128 (48 KiB of f16 keys
// per layer) spent 10.3 us a call in attention without, 8.1-8.3 with the whole K/V fetched
// (steps alternating the two ways in one process: 1.0% less time per token at 128 with 32 KiB
// each, 0.6% at 1024; fetching all of a 1024-key cache, 786 KiB, evicted the weights in flight
// and cost 2.5%).
constexpr int64_t kKvPrefetchBytes = 32 << 10;

// Fetches into L2 the first kKvPrefetchBytes of the keys and of the values that the first query
// row of `launch` (an attention) reads.
void prefetch_kv(const HostStep& step, const StepLaunch& launch) {
  if (launch.boxes.empty() || launch.inputs.size() < 3) return;
  const Box& box = launch.boxes[0];
  const int rank = box.rank();
  if (rank < 3 || box.empty()) return;
  const int row = rank - 3;
  for (int k = 1; k <= 2; ++k) {
    const KernelInput& view = launch.inputs[static_cast<size_t>(k)];
    if (view.data == nullptr || view.extent.rank() != rank) return;
    int64_t index[kMaxRank];
    for (int d = 0; d < rank; ++d) index[d] = std::clamp(box.begin(d), view.extent.begin(d), view.extent.end(d) - 1);
    const int64_t t = box.begin(row);
    const int64_t first = !step.causal ? 0 : step.window > 0 ? std::max<int64_t>(0, t - step.window + 1) : 0;
    const int64_t last = step.causal ? t + 1 : view.extent.end(row);
    index[row] = std::max(first, view.extent.begin(row));
    index[rank - 2] = view.extent.begin(rank - 2);
    index[rank - 1] = view.extent.begin(rank - 1);
    const int64_t rows = std::min(last, view.extent.end(row)) - index[row];
    if (rows <= 0) continue;
    const int64_t size = dtype_size(view.dtype);
    const int64_t bytes = std::min(kKvPrefetchBytes, rows * view.strides[row] * size);
    const char* p = static_cast<const char*>(view.data) + view.offset(index) * size;
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
  }
}

// conv2d splits along output rows where it can: a member then reads (and packs) only the input
// rows of its tile, where a channel split makes every member read all of the input (1x1 convs
// are bound by that memory traffic). Other ops cut from their outermost axis.
int preferred_split_axis(const Node& node) { return node.kind == OpKind::Conv2d ? 2 : 0; }
// A stride-1 conv2d cuts its rows at multiples of its Winograd tile (conv2d_output_tile: 4x4
// tiles; 2x2 for the 5x5 kernels): a cut through a tile makes both members compute it.
int split_unit(const Graph& graph, const Node& node) {
  if (node.kind != OpKind::Conv2d || node.attrs_as<Conv2dAttrs>().stride_h != 1) return 1;
  return conv2d_output_tile(graph, node) == 4 ? 4 : 2;
}

// A launch with less work than this is one tile: cutting it would cost more in waiting for
// the tiles than it saves.
constexpr int64_t kSplitWork = int64_t{1} << 15;

int64_t work_per_element(const Graph& graph, const Node& node) {
  auto in = [&](int i) -> const Node& { return graph.node(node.inputs[static_cast<size_t>(i)]); };
  switch (node.kind) {
    case OpKind::Linear: return in(1).shape.back();
    case OpKind::Matmul: return in(0).shape.back();
    case OpKind::Attention: return in(1).shape[in(1).shape.size() - 3] * in(1).shape.back();
    case OpKind::Conv2d: return in(1).shape[1] * in(1).shape[2] * in(1).shape[3];
    default: return 1;
  }
}

// Elements per step of a cut along axis d of a box of `rank`: 64 on the innermost axis,
// `split_unit` on axis `split_from`, else 1. Cuts fall on multiples of it.
int64_t cut_unit(int d, int rank, int split_from, int split_unit) {
  return d == rank - 1 ? 64 : d == split_from ? split_unit : 1;
}
// The least extent of axis d a tile takes: 4 steps, or 2 on a conv's rows cut at its 4x4 tiles
// (8 rows either way for a Winograd conv: its tile rows pack their own input rows, a cut adds no
// halo).
int64_t min_tile_extent(int d, int rank, int split_from, int split_unit) {
  const int steps = d == split_from && split_unit >= 4 ? 2 : 4;
  return steps * cut_unit(d, rank, split_from, split_unit);
}

// Tile `member` of `members` (here: of tiles) of `box`: cut along the outermost axis with at least min_tile_extent() per
// member (from axis `split_from` first, then from axis 0), else the outermost that divides evenly, else the outermost with at least `members`
// elements, else the widest; a step is cut_unit() elements (where its cuts fall). An
// image of 3 or 4 output channels thus splits along its rows: 3 channels on 2 members would give
// one member twice the other's work, and each member of a channel split reads (a conv: packs)
// the whole input for only a few channels.
Box tile_of(const Box& box, int member, int members, int split_from, int split_unit) {
  const int rank = box.rank();
  if (rank == 0) return member == 0 ? box : Box::of_rank(0);
  auto unit = [&](int d) { return cut_unit(d, rank, split_from, split_unit); };
  auto least = [&](int d) { return min_tile_extent(d, rank, split_from, split_unit); };
  int axis = -1;
  for (int d = std::min(split_from, rank - 1); d < rank && axis < 0; ++d)
    if (box.extent(d) >= members * least(d)) axis = d;
  for (int d = 0; d < rank && axis < 0; ++d)
    if (box.extent(d) >= members * least(d)) axis = d;
  for (int d = 0; d < rank && axis < 0; ++d)
    if (box.extent(d) >= members && box.extent(d) % (members * unit(d)) == 0) axis = d;
  for (int d = 0; d < rank && axis < 0; ++d)
    if (box.extent(d) >= members) axis = d;
  if (axis < 0) {
    axis = 0;
    for (int d = 1; d < rank; ++d)
      if (box.extent(d) > box.extent(axis)) axis = d;
  }
  const int64_t begin = box.begin(axis), extent = box.extent(axis);
  auto cut = [&](int k) {
    int64_t at = begin + extent * k / members;
    const int64_t step = unit(axis);
    if (step > 1 && k > 0 && k < members) at = std::clamp<int64_t>((at + step / 2) / step * step, begin, begin + extent);
    return at;
  };
  Box tile = box;
  tile[axis] = Interval(cut(member), cut(member + 1));
  return tile;
}

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

class HostPreparedPlan final : public PreparedPlan {
 public:
  std::vector<HostStep> steps;
  int64_t member_scratch = 0;  // bytes per member (a multiple of 64)
  int members = 1;             // team size the scratch was sized for
  int64_t shared_scratch = 0;  // bytes after the members' (a team's attention phases)
};

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
  const int64_t t = box.begin(rank - 3);
  const int64_t first = step.causal && step.window > 0 ? std::max<int64_t>(0, t - step.window + 1) : 0;
  const int64_t last = step.causal ? t + 1 : launch.inputs[1].shape[static_cast<size_t>(rank - 3)];
  static const int64_t hack = getenv("PK") ? atoll(getenv("PK")) : kPhasedKeys;
  return last - first >= hack;
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

// While launch j runs, what launch j + 1 reads before its kernel starts (its step, node and
// input views) and the step of launch j + 2 are fetched: a decode step's weight stream evicts
// them, and each line found in memory stalls the launch ~100 ns. SmolLM2-135M decode, steps
// alternating with and without in one process: 0.3-1.4% less time per token (1 thread).
void prefetch_launch(const HostPreparedPlan& plan, std::span<const StepLaunch> launches, size_t j) {
  if (j + 1 >= launches.size()) return;
  if (j + 2 < launches.size()) prefetch_object(&plan.steps[static_cast<size_t>(launches[j + 2].step)], sizeof(HostStep));
  const HostStep& next = plan.steps[static_cast<size_t>(launches[j + 1].step)];
  prefetch_node(*next.node);
  if (!launches[j + 1].inputs.empty())
    prefetch_object(launches[j + 1].inputs.data(), launches[j + 1].inputs.size() * sizeof(KernelInput));
}

}  // namespace

HostBackend::~HostBackend() {
  for (const auto& [id, bytes] : buffers_)
    ::operator delete[](reinterpret_cast<std::byte*>(id), kAlignment);
}

absl::Status HostBackend::supports(const Graph& graph, const Node& node) const {
  if (kernel_for(graph, node) != nullptr) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("[", op_display_name(node), "] backend ",
                                               std::string(name()), " has no kernel for this op (",
                                               dtype_name(node.dtype), " output)"));
}

absl::StatusOr<BufferHandle> HostBackend::allocate(int64_t size_bytes) {
  if (size_bytes < 0)
    return absl::InvalidArgumentError(absl::StrCat("[backend] allocate of ", size_bytes, " bytes"));
  std::byte* p = static_cast<std::byte*>(::operator new[](
      static_cast<size_t>(std::max<int64_t>(size_bytes, 1)), kAlignment, std::nothrow));
  if (p == nullptr)
    return absl::ResourceExhaustedError(
        absl::StrCat("[backend] out of host memory allocating ", size_bytes, " bytes"));
  const uint64_t id = reinterpret_cast<uint64_t>(p);
  buffers_[id] = size_bytes;
  return BufferHandle{id};
}

void HostBackend::free(BufferHandle buffer) {
  auto it = buffers_.find(buffer.id);
  if (it == buffers_.end()) return;
  ::operator delete[](reinterpret_cast<std::byte*>(buffer.id), kAlignment);
  buffers_.erase(it);
}

void* HostBackend::host_address(BufferHandle buffer) const {
  return buffers_.contains(buffer.id) ? reinterpret_cast<void*>(buffer.id) : nullptr;
}

absl::StatusOr<std::byte*> HostBackend::region_address(const BufferRegion& region,
                                                       const Box& box) const {
  auto it = buffers_.find(region.buffer.id);
  if (it == buffers_.end())
    return absl::InvalidArgumentError("[backend] copy with an unknown buffer");
  if (box.rank() != region.extent.rank() || !region.extent.contains(box))
    return absl::InvalidArgumentError(absl::StrCat("[backend] copy of box ", box.to_string(),
                                                   " outside the region ",
                                                   region.extent.to_string()));
  const int64_t bytes = dtype_bytes(region.dtype, region.extent.volume());
  if (region.offset_bytes < 0 || region.offset_bytes + bytes > it->second)
    return absl::InvalidArgumentError(absl::StrCat("[backend] region of ", bytes,
                                                   " bytes at offset ", region.offset_bytes,
                                                   " past a buffer of ", it->second, " bytes"));
  return reinterpret_cast<std::byte*>(region.buffer.id) + region.offset_bytes;
}

absl::Status HostBackend::copy_in(const BufferRegion& region, const Box& box, const void* host) {
  absl::StatusOr<std::byte*> base = region_address(region, box);
  if (!base.ok()) return base.status();
  copy_box_to_view(dense_view(*base, region.dtype, region.extent), box, host);
  return absl::OkStatus();
}

absl::Status HostBackend::copy_out(const BufferRegion& region, const Box& box, void* host) {
  absl::StatusOr<std::byte*> base = region_address(region, box);
  if (!base.ok()) return base.status();
  copy_box_from_view(dense_view(*base, region.dtype, region.extent), box, host);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PreparedPlan>> HostBackend::prepare(const Graph& graph,
                                                                   const Plan& plan) {
  auto prepared = std::make_unique<HostPreparedPlan>();
  prepared->steps.reserve(plan.steps.size());
  prepared->members = threads_;
  for (const PlanStep& ps : plan.steps) {
    if (ps.node < 0 || ps.node >= graph.size())
      return absl::InvalidArgumentError("[backend] plan of another graph");
    const Node& node = graph.node(ps.node);
    if (absl::Status supported = supports(graph, node); !supported.ok()) return supported;
    HostStep step{kernel_for(graph, node), &node, kernel_node(graph, node).constant_data, nullptr,
                  work_per_element(graph, node), preferred_split_axis(node), split_unit(graph, node)};
    if (node.kind == OpKind::Attention && node.rank() >= 3) {
      const Shape& k = graph.node(node.inputs[1]).shape;
      step.kv_heads = k[k.size() - 2];
      step.q_heads = node.shape[node.shape.size() - 2];
      const AttentionAttrs& attrs = node.attrs_as<AttentionAttrs>();
      step.causal = attrs.causal;
      step.window = attrs.window;
    }
    if (step.kernel == nullptr)
      return absl::InternalError("[backend] supported op without a kernel");
    step.prepared = prepare_node(graph, node, step.kernel);
    if (step.kv_heads > 0 && threads_ > 1) {
      step.phases = attention_phases_for(graph, node, step.kernel);
      prepared->shared_scratch = std::max(prepared->shared_scratch, (step.phases.shared_bytes + 63) / 64 * 64);
    }
    if (node.kind == OpKind::Linear) {
      const Node& weight = graph.node(node.inputs[1]);
      if (step.prepared != nullptr) {
        step.stream = static_cast<const char*>(step.prepared);
        step.stream_bytes = prepared_size(graph, node, step.kernel);
      } else if (weight.kind == OpKind::Constant && graph.constant_data(weight.constant).data != nullptr) {
        step.stream = static_cast<const char*>(graph.constant_data(weight.constant).data);
        step.stream_bytes = weight.size_bytes();
      }
    }
    prepared->steps.push_back(step);
    // Session views are dense row-major (the only views this backend is given by a plan).
    prepared->member_scratch = std::max(prepared->member_scratch,
                                        (kernel_scratch_bytes(graph, node, /*dense_views=*/true) + 63) / 64 * 64);
  }
  // Groups: runs of consecutive linears with one group kernel, the same x and packed weights.
  std::vector<HostStep>& steps = prepared->steps;
  for (size_t i = 0; i < steps.size();) {
    const GroupKernelFn group = steps[i].node->kind == OpKind::Linear && steps[i].prepared != nullptr
                                    ? group_kernel_for(steps[i].kernel)
                                    : nullptr;
    size_t end = i + 1;
    if (group != nullptr)
      while (end < steps.size() && end - i < kMaxGroup && steps[end].kernel == steps[i].kernel &&
             steps[end].node->kind == OpKind::Linear && steps[end].prepared != nullptr &&
             steps[end].node->inputs[0] == steps[i].node->inputs[0])
        ++end;
    if (end - i > 1) {
      steps[i].group = group;
      steps[i].group_size = static_cast<int>(end - i);
    }
    i = end;
  }
  prepared->scratch_bytes = prepared->member_scratch * prepared->members + prepared->shared_scratch;
  return std::unique_ptr<PreparedPlan>(std::move(prepared));
}

void HostBackend::expect_run() {
  if (threads_ <= 1) return;
  if (team_ == nullptr) team_ = cpu::WorkerTeam::shared(threads_);
  team_->wake();
}

void HostBackend::set_threads(int threads) {
  threads = std::max(1, threads);
  if (threads == threads_) return;
  threads_ = threads;
  team_.reset();
}

// Tile `tile` of `tiles` of each of the launch's boxes.
absl::Status HostBackend::run_launch(const PreparedPlan& prepared, const StepLaunch& launch, int tile,
                                     int tiles, std::span<std::byte> scratch) const {
  const HostStep& step = static_cast<const HostPreparedPlan&>(prepared).steps[static_cast<size_t>(launch.step)];
  KernelNode node(*step.node);
  node.constant_data = step.constant_data;
  node.prepared = step.prepared;
  for (const Box& box : launch.boxes) {
    if (tiles > 1 && box.rank() == 0 && tile != 0) continue;  // a scalar is one tile's
    const Box part = tiles > 1 ? tile_of(box, tile, tiles, step.split_from, step.split_unit) : box;
    if (part.empty() && part.rank() > 0) continue;
    if (absl::Status status = step.kernel(KernelArgs{node, launch.inputs, launch.out, part, scratch}); !status.ok())
      return status;
  }
  return absl::OkStatus();
}

absl::Status HostBackend::run_group(const PreparedPlan& prepared, std::span<const StepLaunch> launches, size_t j,
                                    int count, int tile, int tiles, std::span<std::byte> scratch) const {
  const auto& plan = static_cast<const HostPreparedPlan&>(prepared);
  const GroupKernelFn group = plan.steps[static_cast<size_t>(launches[j].step)].group;
  absl::InlinedVector<KernelNode, kMaxGroup> nodes;
  absl::InlinedVector<Box, kMaxGroup> parts;
  for (int m = 0; m < count; ++m) {
    const HostStep& step = plan.steps[static_cast<size_t>(launches[j + static_cast<size_t>(m)].step)];
    KernelNode& node = nodes.emplace_back(*step.node);
    node.constant_data = step.constant_data;
    node.prepared = step.prepared;
    parts.push_back(group_tile(launches[j + static_cast<size_t>(m)].boxes[0], tile, tiles));
  }
  absl::InlinedVector<KernelArgs, kMaxGroup> args;
  for (int m = 0; m < count; ++m) {
    const StepLaunch& launch = launches[j + static_cast<size_t>(m)];
    args.push_back(KernelArgs{nodes[static_cast<size_t>(m)], launch.inputs, launch.out, parts[static_cast<size_t>(m)], scratch});
  }
  return group(std::span<const KernelArgs>(args.data(), args.size()));
}

// A member that claims a values tile waits for the scores tiles, which were all claimed before
// it by members that are running them (claims are in order), so it never waits for a tile that
// no member has reached.
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

absl::Status HostBackend::run(const PreparedPlan& prepared, std::span<const StepLaunch> launches,
                              std::span<std::byte> scratch) {
  const auto* plan = dynamic_cast<const HostPreparedPlan*>(&prepared);
  if (plan == nullptr)
    return absl::InvalidArgumentError("[backend] plan prepared by another backend");
  for (const StepLaunch& launch : launches)
    if (launch.step < 0 || static_cast<size_t>(launch.step) >= plan->steps.size())
      return absl::InvalidArgumentError(
          absl::StrCat("[backend] step ", launch.step, " not in the plan"));
  if (plan->members != threads_)
    return absl::InvalidArgumentError("[backend] plan prepared for another thread count");
  if (static_cast<int64_t>(scratch.size()) < plan->scratch_bytes)
    return absl::InvalidArgumentError(absl::StrCat("[backend] run given ", scratch.size(), " bytes of scratch, the plan needs ",
                                                   plan->scratch_bytes));
  last_failed_step_ = -1;
  auto slice = [&](int member) {
    return scratch.subspan(static_cast<size_t>(plan->member_scratch * member), static_cast<size_t>(plan->member_scratch));
  };
  if (threads_ == 1) {
    if (launch_times_ != nullptr) launch_times_->assign(launches.size(), 0.0);
    // Per launch: the attention launch whose K/V it fetches ahead (kKvPrefetchBytes), or none.
    kv_prefetch_.assign(launches.size(), kNoLaunch);
    size_t last_stream = kNoLaunch;
    for (size_t j = 0; j < launches.size(); ++j) {
      const HostStep& step = plan->steps[static_cast<size_t>(launches[j].step)];
      if (step.kv_heads > 0 && last_stream != kNoLaunch) kv_prefetch_[last_stream] = j;
      if (step.kv_heads > 0) last_stream = kNoLaunch;
      else if (step.stream_bytes > 0) last_stream = j;
    }
    for (size_t j = 0; j < launches.size(); ++j) {
      const HostStep& step = plan->steps[static_cast<size_t>(launches[j].step)];
      const int count = step.group_size > 1 && groupable(launches, j, step.group_size) ? step.group_size : 1;
      prefetch_launch(*plan, launches, j + static_cast<size_t>(count) - 1);
      for (size_t m = j; m < j + static_cast<size_t>(count); ++m)
        if (const size_t a = kv_prefetch_[m]; a != kNoLaunch)
          prefetch_kv(plan->steps[static_cast<size_t>(launches[a].step)], launches[a]);
      const auto start = launch_times_ != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      const absl::Status status =
          count > 1 ? run_group(prepared, launches, j, count, 0, 1, slice(0)) : run_launch(prepared, launches[j], 0, 1, slice(0));
      if (!status.ok()) {
        last_failed_step_ = launches[j].step;
        return status;
      }
      stats_.grouped_launches += count - 1;
      // A group's time is its first launch's.
      if (launch_times_ != nullptr)
        (*launch_times_)[j] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      j += static_cast<size_t>(count) - 1;
    }
    return absl::OkStatus();
  }
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
    if (group_count_[j] == 0) {
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
      if (previous != kNoLaunch && launch_tiles.claimed.load(std::memory_order_relaxed) < total) {
        read_ahead(*plan, launches, j, tiles_[previous], cursor);
        cpu::WorkerTeam::wait_at_least(tiles_[previous].done, tiles_[previous].total);
      }
      if (member == 0 && launch_times_ != nullptr && previous != kNoLaunch) {
        const auto now = std::chrono::steady_clock::now();
        (*launch_times_)[previous] = std::chrono::duration<double>(now - last).count();
        last = now;
      }
      for (uint32_t t = launch_tiles.claimed.fetch_add(1, std::memory_order_relaxed); t < total;
           t = launch_tiles.claimed.fetch_add(1, std::memory_order_relaxed)) {
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
