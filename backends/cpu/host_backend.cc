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
#include "backends/cpu/host_plan.h"
#include "engine/op_def.h"
#include "engine/prefetch.h"

namespace tessera {

using host::HostPreparedPlan;
using host::HostStep;
using host::group_tile;
using host::groupable;
using host::kGroupRows;
using host::kMaxGroup;
using host::min_tile_extent;
using host::tile_of;

namespace {

constexpr std::align_val_t kAlignment{64};

}  // namespace

namespace host {

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

}  // namespace host

namespace {

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
    const auto [first, last] = step.visible_keys(t, view.extent.end(row));
    index[row] = std::max(first, view.extent.begin(row));
    index[rank - 2] = view.extent.begin(rank - 2);
    index[rank - 1] = view.extent.begin(rank - 1);
    const int64_t rows = std::min(last, view.extent.end(row)) - index[row];
    if (rows <= 0) continue;
    const char* p = static_cast<const char*>(view.data) + dtype_bytes(view.dtype, view.offset(index));
    const int64_t bytes = std::min(kKvPrefetchBytes, dtype_bytes(view.dtype, rows * view.strides[row]));
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

}  // namespace

namespace host {

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

}  // namespace host

namespace {

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
      if (launches[j].boxes.empty()) continue;  // nothing to run (an in-place reshape)
      const HostStep& step = plan->steps[static_cast<size_t>(launches[j].step)];
      if (step.kv_heads > 0 && last_stream != kNoLaunch) kv_prefetch_[last_stream] = j;
      if (step.kv_heads > 0) last_stream = kNoLaunch;
      else if (step.stream_bytes > 0) last_stream = j;
    }
    for (size_t j = 0; j < launches.size(); ++j) {
      if (launches[j].boxes.empty()) continue;
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
      stats_.launches += count;
      stats_.grouped_launches += count - 1;
      // A group's time is its first launch's.
      if (launch_times_ != nullptr)
        (*launch_times_)[j] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      j += static_cast<size_t>(count) - 1;
    }
    return absl::OkStatus();
  }
  return run_team(*plan, launches, scratch);
}

}  // namespace tessera
