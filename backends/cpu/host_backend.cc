#include "backends/cpu/host_backend.h"

#include <cstring>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"

namespace tessera {

namespace {

constexpr std::align_val_t kAlignment{64};

struct HostStep {
  KernelFn kernel = nullptr;
  const Node* node = nullptr;  // in the graph given to prepare (which outlives the plan)
  const void* constant_data = nullptr;
};

class HostPreparedPlan final : public PreparedPlan {
 public:
  std::vector<HostStep> steps;
};

// Calls `fn(offset_elems, run_elems)` for each contiguous innermost run of `box` inside a dense
// row-major `extent` (offsets relative to the extent's first element), in row-major order.
template <class Fn>
void for_each_run(const Box& extent, const Box& box, Fn fn) {
  const int rank = box.rank();
  if (box.empty()) return;
  if (rank == 0) return fn(int64_t{0}, int64_t{1});
  int64_t strides[kMaxRank];
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= extent.extent(d);
  }
  int64_t index[kMaxRank];
  for (int d = 0; d < rank; ++d) index[d] = box.begin(d);
  const int64_t run = box.extent(rank - 1);
  while (true) {
    int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset += (index[d] - extent.begin(d)) * strides[d];
    fn(offset, run);
    int d = rank - 2;
    for (; d >= 0; --d) {
      if (++index[d] < box.end(d)) break;
      index[d] = box.begin(d);
    }
    if (d < 0) return;
  }
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
  const int64_t size = dtype_size(region.dtype);
  const std::byte* src = static_cast<const std::byte*>(host);
  for_each_run(region.extent, box, [&](int64_t offset, int64_t run) {
    std::memcpy(*base + offset * size, src, static_cast<size_t>(run * size));
    src += run * size;
  });
  return absl::OkStatus();
}

absl::Status HostBackend::copy_out(const BufferRegion& region, const Box& box, void* host) {
  absl::StatusOr<std::byte*> base = region_address(region, box);
  if (!base.ok()) return base.status();
  const int64_t size = dtype_size(region.dtype);
  std::byte* dst = static_cast<std::byte*>(host);
  for_each_run(region.extent, box, [&](int64_t offset, int64_t run) {
    std::memcpy(dst, *base + offset * size, static_cast<size_t>(run * size));
    dst += run * size;
  });
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PreparedPlan>> HostBackend::prepare(const Graph& graph,
                                                                   const Plan& plan) {
  auto prepared = std::make_unique<HostPreparedPlan>();
  prepared->steps.reserve(plan.steps.size());
  for (const PlanStep& ps : plan.steps) {
    if (ps.node < 0 || ps.node >= graph.size())
      return absl::InvalidArgumentError("[backend] plan of another graph");
    const Node& node = graph.node(ps.node);
    if (absl::Status supported = supports(graph, node); !supported.ok()) return supported;
    HostStep step{kernel_for(graph, node), &node, kernel_node(graph, node).constant_data};
    if (step.kernel == nullptr)
      return absl::InternalError("[backend] supported op without a kernel");
    prepared->steps.push_back(step);
  }
  return std::unique_ptr<PreparedPlan>(std::move(prepared));
}

absl::Status HostBackend::run(const PreparedPlan& prepared, std::span<const StepLaunch> launches) {
  const auto* plan = dynamic_cast<const HostPreparedPlan*>(&prepared);
  if (plan == nullptr)
    return absl::InvalidArgumentError("[backend] plan prepared by another backend");
  for (const StepLaunch& launch : launches) {
    if (launch.step < 0 || static_cast<size_t>(launch.step) >= plan->steps.size())
      return absl::InvalidArgumentError(
          absl::StrCat("[backend] step ", launch.step, " not in the plan"));
    const HostStep& step = plan->steps[static_cast<size_t>(launch.step)];
    KernelNode node(*step.node);
    node.constant_data = step.constant_data;
    for (const Box& box : launch.boxes) {
      absl::Status status = step.kernel(KernelArgs{node, launch.inputs, launch.out, box});
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
