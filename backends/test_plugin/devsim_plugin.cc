// The "devsim" backend plugin: a device whose memory the host cannot address, simulated in
// private host memory, so that sessions' device paths (explicit copies, device-resident values,
// fallback of unsupported ops to the CPU) run for real without a GPU.
//
// Device addresses: buffer k (from 1) spans [k << 36, k << 36 + size) of a private address
// space; a BufferHandle's id is its base, and a view's data pointer is base + byte offset, as a
// GPU backend's views carry device addresses. run() resolves every view to private memory and
// refuses (InvalidArgument) any pointer that is not inside one of its buffers, host pointers
// included. Kernels: the reference kernels, for a subset of f32 ops (elementwise, fused chains,
// matmul, softmax, reductions, reshape, permute); everything else is unsupported.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "engine/op_def.h"
#include "backends/test_plugin/covered_ops.h"
#include "kernels/ref/ref_kernels.h"

namespace tessera {
namespace {

constexpr int kAddressBits = 36;  // 64 GiB per buffer at most

using test_plugins::covered;

struct DevStep {
  KernelFn kernel = nullptr;
  const Node* node = nullptr;
};

class DevPreparedPlan final : public PreparedPlan {
 public:
  std::vector<DevStep> steps;
};

class DevsimBackend final : public Backend {
 public:
  DevsimBackend() : Backend(/*host_addressable=*/false) {}

  std::string_view name() const override { return "devsim"; }

  absl::Status supports(const Graph& graph, const Node& node) const override {
    bool ok = covered(node.kind) && node.dtype == DType::F32;
    for (NodeId in : node.inputs) ok = ok && graph.node(in).dtype == DType::F32;
    if (ok) return absl::OkStatus();
    return absl::UnimplementedError(
        absl::StrCat("[", op_display_name(node), "] backend devsim has no kernel for this op"));
  }

  absl::StatusOr<BufferHandle> allocate(int64_t size_bytes) override {
    if (size_bytes < 0 || size_bytes >= (int64_t{1} << kAddressBits))
      return absl::ResourceExhaustedError(absl::StrCat("[devsim] cannot allocate ", size_bytes, " bytes"));
    const uint64_t id = (next_++) << kAddressBits;
    buffers_[id] = std::vector<std::byte>(static_cast<size_t>(std::max<int64_t>(size_bytes, 1)));
    return BufferHandle{id};
  }

  void free(BufferHandle buffer) override { buffers_.erase(buffer.id); }

  absl::Status copy_in(const BufferRegion& region, const Box& box, const void* host) override {
    absl::StatusOr<std::byte*> base = region_address(region, box);
    if (!base.ok()) return base.status();
    copy_box_to_view(dense_view(*base, region.dtype, region.extent), box, host);
    return absl::OkStatus();
  }

  absl::Status copy_out(const BufferRegion& region, const Box& box, void* host) override {
    absl::StatusOr<std::byte*> base = region_address(region, box);
    if (!base.ok()) return base.status();
    copy_box_from_view(dense_view(*base, region.dtype, region.extent), box, host);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepare(const Graph& graph, const Plan& plan) override {
    auto prepared = std::make_unique<DevPreparedPlan>();
    for (const PlanStep& ps : plan.steps) {
      if (ps.node < 0 || ps.node >= graph.size()) return absl::InvalidArgumentError("[devsim] plan of another graph");
      const Node& node = graph.node(ps.node);
      if (absl::Status st = supports(graph, node); !st.ok()) return st;
      prepared->steps.push_back(DevStep{ref::reference_kernel(node.kind), &node});
    }
    return std::unique_ptr<PreparedPlan>(std::move(prepared));
  }

  absl::Status run(const PreparedPlan& prepared, std::span<const StepLaunch> launches,
                   std::span<std::byte>) override {
    const auto* plan = dynamic_cast<const DevPreparedPlan*>(&prepared);
    if (plan == nullptr) return absl::InvalidArgumentError("[devsim] plan prepared by another backend");
    last_failed_step_ = -1;
    std::vector<KernelInput> inputs;
    for (const StepLaunch& launch : launches) {
      if (launch.step < 0 || static_cast<size_t>(launch.step) >= plan->steps.size())
        return absl::InvalidArgumentError(absl::StrCat("[devsim] step ", launch.step, " not in the plan"));
      const DevStep& step = plan->steps[static_cast<size_t>(launch.step)];
      inputs.assign(launch.inputs.begin(), launch.inputs.end());
      absl::Status status = absl::OkStatus();
      for (KernelInput& in : inputs)
        if (status.ok()) status = resolve(in);
      TensorView out = launch.out;
      if (status.ok()) status = resolve(out);
      for (const Box& box : launch.boxes) {
        if (!status.ok()) break;
        status = step.kernel(KernelArgs{KernelNode(*step.node), inputs, out, box});
      }
      if (!status.ok()) {
        last_failed_step_ = launch.step;
        return status;
      }
    }
    return absl::OkStatus();
  }

  absl::Status synchronize() override { return absl::OkStatus(); }

 private:
  // The private memory behind a device address, checked to hold the whole view.
  absl::Status resolve(TensorView& view) const {
    const uint64_t address = reinterpret_cast<uint64_t>(view.data);
    const uint64_t base = address >> kAddressBits << kAddressBits;
    auto it = buffers_.find(base);
    if (it == buffers_.end())
      return absl::InvalidArgumentError(absl::StrCat("[devsim] view at 0x", absl::Hex(address),
                                                     " is not device memory of this backend"));
    int64_t last = 0;  // furthest element offset the view can address
    for (int d = 0; d < view.extent.rank(); ++d)
      last += (std::max<int64_t>(view.extent.extent(d), 1) - 1) * view.strides[static_cast<size_t>(d)];
    const int64_t offset = static_cast<int64_t>(address - base);
    if (view.extent.volume() > 0 && offset + (last + 1) * dtype_size(view.dtype) > static_cast<int64_t>(it->second.size()))
      return absl::InvalidArgumentError("[devsim] view past the end of its buffer");
    view.data = const_cast<std::byte*>(it->second.data()) + offset;
    return absl::OkStatus();
  }

  absl::StatusOr<std::byte*> region_address(const BufferRegion& region, const Box& box) {
    auto it = buffers_.find(region.buffer.id);
    if (it == buffers_.end()) return absl::InvalidArgumentError("[devsim] copy with an unknown buffer");
    if (box.rank() != region.extent.rank() || !region.extent.contains(box))
      return absl::InvalidArgumentError(absl::StrCat("[devsim] copy of box ", box.to_string(), " outside the region ",
                                                     region.extent.to_string()));
    const int64_t bytes = dtype_bytes(region.dtype, region.extent.volume());
    if (region.offset_bytes < 0 || region.offset_bytes + bytes > static_cast<int64_t>(it->second.size()))
      return absl::InvalidArgumentError("[devsim] copy region past the end of its buffer");
    return it->second.data() + region.offset_bytes;
  }

  absl::flat_hash_map<uint64_t, std::vector<std::byte>> buffers_;
  uint64_t next_ = 1;
};

Backend* create(char* error, size_t error_size) {
  try {
    return new DevsimBackend();
  } catch (const std::exception& e) {  // never throw across the plugin boundary
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}

const TesseraBackendPlugin kPlugin = {TESSERA_BACKEND_ABI_VERSION, "devsim", &create};

}  // namespace
}  // namespace tessera

extern "C" __attribute__((visibility("default"))) const TesseraBackendPlugin* tessera_backend_plugin(void) {
  return &tessera::kPlugin;
}
