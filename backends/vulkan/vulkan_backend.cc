// The "vulkan" backend plugin: GLSL compute shaders generated per op (backends/gpu/codegen.h),
// compiled to SPIR-V by glslang once per source and device (cached in memory and on disk, see
// vulkan_device.h), run on one queue of the first compute-capable Vulkan device
// (TESSERA_VULKAN_DEVICE=N picks another). Tested for real on Mesa lavapipe.
//
// Device addresses: buffer k spans [k << 40, (k << 40) + size) of a virtual space (Vulkan
// buffers have no addresses here); a view's data is base + byte offset. Buffers live in
// device-local memory: where that is host-visible, coherent and cached (unified memory) copies
// are memcpy of contiguous runs after the queue is idle, else (discrete GPUs) the runs are
// copied by the queue through a staging buffer in cached host memory (vulkan_device.h).
// A run() records one command buffer (a descriptor set per launch, the parameters of every
// dispatch in one int32 buffer, a barrier before a launch that touches a buffer an earlier
// launch of the run wrote or read) and submits it; synchronize() or the next copy or run waits.
// Each view binds only the window of its buffer it spans, so element offsets fit int32; a linear
// launch whose quantised weight exceeds one binding is split along the output columns.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "backends/gpu/codegen.h"
#include "backends/gpu/device_copies.h"
#include "backends/vulkan/vulkan_device.h"
#include "engine/op_def.h"

namespace tessera {
namespace {

using vulkan::DeviceBuffer;
using vulkan::vk_error;

constexpr int kAddressBits = 40;

struct VkStep {
  const vulkan::Pipeline* pipeline = nullptr;  // owned by the device
  gpu::GeneratedKernel code;
  const Node* node = nullptr;
};

class VkPreparedPlan final : public PreparedPlan {
 public:
  std::vector<VkStep> steps;
};

// One storage-buffer binding of a launch: a window of a buffer.
struct Binding {
  uint64_t buffer = 0;  // the buffer's base address
  VkBuffer vk = VK_NULL_HANDLE;
  VkDeviceSize offset = 0, range = 0;
};

// A launch, resolved: its pipeline, bindings (params first) and dispatches.
struct Recorded {
  const vulkan::Pipeline* pipeline = nullptr;
  std::vector<Binding> bindings;
  std::vector<std::pair<int32_t, uint32_t>> dispatches;  // (first parameter, work groups)
  bool barrier = false;                                  // wait for the launches before it
};

class VulkanBackend final : public Backend {
 public:
  VulkanBackend() : Backend(/*host_addressable=*/false) {}
  ~VulkanBackend() override {
    if (device_.device() == VK_NULL_HANDLE) return;
    vkDeviceWaitIdle(device_.device());
    for (auto& [base, buffer] : buffers_) device_.destroy(buffer);
    device_.destroy(params_);
    device_.destroy(staging_);
    if (pool_ != VK_NULL_HANDLE) vkDestroyDescriptorPool(device_.device(), pool_, nullptr);
    if (fence_ != VK_NULL_HANDLE) vkDestroyFence(device_.device(), fence_, nullptr);
    if (commands_ != VK_NULL_HANDLE) vkDestroyCommandPool(device_.device(), commands_, nullptr);
  }

  // Opens the device; an error when there is none (the backend is then absent).
  absl::Status open() {
    if (absl::Status st = device_.open(); !st.ok()) return st;
    description_ = device_.description();
    VkDevice d = device_.device();
    VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool.queueFamilyIndex = device_.queue_family();
    if (VkResult r = vkCreateCommandPool(d, &pool, nullptr, &commands_); r != VK_SUCCESS)
      return absl::InternalError(vk_error("vkCreateCommandPool", r));
    VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    alloc.commandPool = commands_;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    if (VkResult r = vkAllocateCommandBuffers(d, &alloc, &command_); r != VK_SUCCESS)
      return absl::InternalError(vk_error("vkAllocateCommandBuffers", r));
    VkFenceCreateInfo fence{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (VkResult r = vkCreateFence(d, &fence, nullptr, &fence_); r != VK_SUCCESS)
      return absl::InternalError(vk_error("vkCreateFence", r));
    return absl::OkStatus();
  }

  std::string_view name() const override { return "vulkan"; }

  absl::Status supports(const Graph& graph, const Node& node) const override {
    // Offsets in the shaders are int32: larger tensors stay on the host.
    constexpr int64_t kMaxElements = int64_t{1} << 31;
    if (shape_volume(node.shape) >= kMaxElements)
      return absl::UnimplementedError("[vulkan] tensor of 2^31 elements or more");
    for (NodeId in : node.inputs)
      if (shape_volume(graph.node(in).shape) >= kMaxElements)
        return absl::UnimplementedError("[vulkan] input of 2^31 elements or more");
    return gpu::generate_glsl(graph, node).status();
  }

  absl::StatusOr<BufferHandle> allocate(int64_t size_bytes) override {
    if (size_bytes < 0 || size_bytes >= (int64_t{1} << kAddressBits))
      return absl::InvalidArgumentError(
          absl::StrCat("[vulkan] allocate of ", size_bytes, " bytes"));
    absl::StatusOr<DeviceBuffer> b = device_.make_buffer(size_bytes);
    if (!b.ok()) return b.status();
    const uint64_t base = (next_++) << kAddressBits;
    buffers_[base] = *b;
    return BufferHandle{base};
  }

  void free(BufferHandle buffer) override {
    auto it = buffers_.find(buffer.id);
    if (it == buffers_.end()) return;
    // The queue may still use it; an error of that work is kept for synchronize().
    if (absl::Status st = wait(); !st.ok() && deferred_.ok()) deferred_ = st;
    device_.destroy(it->second);
    buffers_.erase(it);
  }

  absl::Status copy_in(const BufferRegion& region, const Box& box, const void* host) override {
    return copy(region, box, const_cast<void*>(host), /*in=*/true);
  }
  absl::Status copy_out(const BufferRegion& region, const Box& box, void* host) override {
    return copy(region, box, host, /*in=*/false);
  }

  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepare(const Graph& graph,
                                                        const Plan& plan) override {
    auto prepared = std::make_unique<VkPreparedPlan>();
    for (const PlanStep& ps : plan.steps) {
      if (ps.node < 0 || ps.node >= graph.size())
        return absl::InvalidArgumentError("[vulkan] plan of another graph");
      const Node& node = graph.node(ps.node);
      if (absl::Status st = supports(graph, node); !st.ok()) return st;
      absl::StatusOr<gpu::GeneratedKernel> code = gpu::generate_glsl(graph, node);
      if (!code.ok()) return code.status();
      const uint32_t bindings = static_cast<uint32_t>(2 + node.inputs.size());
      absl::StatusOr<const vulkan::Pipeline*> pipeline =
          device_.pipeline(code->source, bindings, stats_);
      if (!pipeline.ok()) return pipeline.status();
      prepared->steps.push_back(VkStep{*pipeline, std::move(*code), &node});
    }
    return std::unique_ptr<PreparedPlan>(std::move(prepared));
  }

  absl::Status run(const PreparedPlan& prepared, std::span<const StepLaunch> launches,
                   std::span<std::byte>) override;

  absl::Status synchronize() override {
    absl::Status st = wait();
    if (!deferred_.ok()) st = std::exchange(deferred_, absl::OkStatus());
    return st;
  }

 private:
  // Waits for the submitted command buffer, if any; its error (once).
  absl::Status wait() {
    if (!in_flight_) return absl::OkStatus();
    in_flight_ = false;
    const VkResult r = vkWaitForFences(device_.device(), 1, &fence_, VK_TRUE, UINT64_MAX);
    vkResetFences(device_.device(), 1, &fence_);
    return r == VK_SUCCESS ? absl::OkStatus() : absl::InternalError(vk_error("vkWaitForFences", r));
  }

  // The buffer and byte offset behind a device address.
  absl::StatusOr<std::pair<DeviceBuffer*, int64_t>> resolve(const void* data) {
    const uint64_t address = reinterpret_cast<uint64_t>(data);
    auto it = buffers_.find(address >> kAddressBits << kAddressBits);
    if (it == buffers_.end())
      return absl::InvalidArgumentError(
          absl::StrCat("[vulkan] 0x", absl::Hex(address), " is not device memory of this backend"));
    return std::make_pair(&it->second, static_cast<int64_t>(address - it->first));
  }

  absl::Status copy(const BufferRegion& region, const Box& box, void* host, bool in);
  // copy() of a buffer the host cannot map: through staging_, by the queue (which is idle).
  absl::Status staged_copy(const DeviceBuffer& buffer, const BufferRegion& region, const Box& box, std::byte* host,
                           bool in);
  // The binding of the window of its buffer that `view` spans, and the element offset of the
  // view's data inside that window.
  absl::StatusOr<std::pair<Binding, int64_t>> window(const TensorView& view);
  absl::StatusOr<Recorded> resolve_launch(const VkStep& step, const StepLaunch& launch,
                                          std::vector<int32_t>& params);
  absl::Status submit(std::vector<Recorded>& recorded, const std::vector<int32_t>& params);
  // Makes `buffer` (a host buffer: parameters, staging) hold at least `bytes`: when smaller, a new
  // one of twice its size or `bytes`, whichever is more (its contents are not kept).
  absl::Status grow(DeviceBuffer& buffer, int64_t bytes, vulkan::Device::Use use);
  absl::Status begin_commands();
  absl::Status end_and_submit();
  // Records a global memory barrier into the command buffer.
  void barrier(VkPipelineStageFlags src_stage, VkAccessFlags src_access, VkPipelineStageFlags dst_stage,
               VkAccessFlags dst_access);
  // A linear launch whose quantised weight spans more than one binding can hold, as launches
  // over column ranges of its boxes that each bind the weight rows they read (storage in
  // `split`); any other launch as it is.
  struct SplitLaunches {
    std::deque<std::array<KernelInput, 2>> inputs;
    std::deque<Box> boxes;
  };
  std::vector<StepLaunch> split_wide_weights(const VkStep& step, const StepLaunch& launch, SplitLaunches& split) const;
  absl::Status reserve(size_t sets, size_t descriptors, size_t param_bytes);

  vulkan::Device device_;
  VkCommandPool commands_ = VK_NULL_HANDLE;
  VkCommandBuffer command_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  bool in_flight_ = false;
  absl::Status deferred_;  // an error of earlier work found by free()
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  size_t pool_sets_ = 0, pool_descriptors_ = 0;
  DeviceBuffer params_;
  DeviceBuffer staging_;  // staged copies' host side (grown as needed)
  absl::flat_hash_map<uint64_t, DeviceBuffer> buffers_;
  uint64_t next_ = 1;
};

// Box copies as memcpy of contiguous runs (mapped memory), else staged_copy.
absl::Status VulkanBackend::copy(const BufferRegion& region, const Box& box, void* host, bool in) {
  auto it = buffers_.find(region.buffer.id);
  if (it == buffers_.end())
    return absl::InvalidArgumentError("[vulkan] copy with an unknown buffer");
  if (!box.empty())
    if (absl::Status st = wait(); !st.ok()) return st;  // copies take effect in call order
  std::byte* mapped = it->second.mapped;
  auto* bytes = static_cast<std::byte*>(host);
  if (mapped == nullptr) return staged_copy(it->second, region, box, bytes, in);
  return gpu::for_each_box_run("vulkan", region, box, it->second.bytes, [&](int64_t at, int64_t dense, int64_t n) {
    in ? std::memcpy(mapped + at, bytes + dense, static_cast<size_t>(n))
       : std::memcpy(bytes + dense, mapped + at, static_cast<size_t>(n));
    return absl::OkStatus();
  });
}

// The box's runs as one vkCmdCopyBuffer between the buffer and staging_, which holds the box
// densely (the host's layout): one memcpy on the host side. Barriers order the copy after the
// shaders that wrote or read the buffer, and the shaders and host reads after it.
absl::Status VulkanBackend::staged_copy(const DeviceBuffer& buffer, const BufferRegion& region, const Box& box,
                                        std::byte* host, bool in) {
  std::vector<VkBufferCopy> runs;
  int64_t total = 0;
  absl::Status listed = gpu::for_each_box_run("vulkan", region, box, buffer.bytes, [&](int64_t at, int64_t dense, int64_t n) {
    runs.push_back(in ? VkBufferCopy{static_cast<VkDeviceSize>(dense), static_cast<VkDeviceSize>(at), static_cast<VkDeviceSize>(n)}
                      : VkBufferCopy{static_cast<VkDeviceSize>(at), static_cast<VkDeviceSize>(dense), static_cast<VkDeviceSize>(n)});
    total = std::max(total, dense + n);
    return absl::OkStatus();
  });
  if (!listed.ok() || runs.empty()) return listed;
  if (absl::Status st = grow(staging_, total, vulkan::Device::Use::kStaging); !st.ok()) return st;
  if (in) std::memcpy(staging_.mapped, host, static_cast<size_t>(total));
  if (absl::Status st = begin_commands(); !st.ok()) return st;
  const VkPipelineStageFlags work = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  const VkAccessFlags work_access = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                    VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier(work | VK_PIPELINE_STAGE_HOST_BIT, work_access | VK_ACCESS_HOST_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  vkCmdCopyBuffer(command_, in ? staging_.buffer : buffer.buffer, in ? buffer.buffer : staging_.buffer,
                  static_cast<uint32_t>(runs.size()), runs.data());
  barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, work | VK_PIPELINE_STAGE_HOST_BIT,
          work_access | VK_ACCESS_HOST_READ_BIT);
  if (absl::Status st = end_and_submit(); !st.ok()) return st;
  if (absl::Status st = wait(); !st.ok()) return st;
  if (!in) std::memcpy(host, staging_.mapped, static_cast<size_t>(total));
  return absl::OkStatus();
}

absl::StatusOr<std::pair<Binding, int64_t>> VulkanBackend::window(const TensorView& view) {
  if (view.data == nullptr && !buffers_.empty()) {  // an input the box does not read (concat's other slabs)
    Binding b;
    b.vk = buffers_.begin()->second.buffer;
    b.range = 4;
    return std::make_pair(b, int64_t{0});
  }
  absl::StatusOr<std::pair<DeviceBuffer*, int64_t>> r = resolve(view.data);
  if (!r.ok()) return r.status();
  const DeviceBuffer& buffer = *r->first;
  const int64_t esize = gpu::address_unit(view.dtype);
  if (r->second % esize != 0)
    return absl::InvalidArgumentError("[vulkan] view not aligned to its element size");
  const int64_t at = r->second / esize;
  int64_t lo = at, hi = at;  // the elements (bytes when byte-addressed) the view spans
  bool empty = false;
  if (is_quantized(view.dtype)) {  // dense whole rows of blocks
    empty = view.extent.rank() != 2 || view.extent.extent(0) <= 0;
    if (!empty) hi = at + view.extent.extent(0) * dtype_bytes(view.dtype, view.extent.extent(1)) - 1;
  } else {
    for (int d = 0; d < view.extent.rank(); ++d) {
      const int64_t span = (view.extent.extent(d) - 1) * view.strides[static_cast<size_t>(d)];
      empty = empty || view.extent.extent(d) <= 0;
      (span < 0 ? lo : hi) += span;
    }
  }
  Binding b;
  b.buffer = reinterpret_cast<uint64_t>(view.data) >> kAddressBits << kAddressBits;
  b.vk = buffer.buffer;
  if (empty) {  // nothing is read or written: any valid range does
    b.range = 4;
    return std::make_pair(b, int64_t{0});
  }
  if (lo < 0 || (hi + 1) * esize > buffer.capacity)
    return absl::InvalidArgumentError("[vulkan] view outside its buffer");
  const int64_t align = static_cast<int64_t>(
      std::max<VkDeviceSize>(device_.limits().minStorageBufferOffsetAlignment, 4));
  const int64_t begin = lo * esize / align * align;
  // Whole 4-byte words: byte-addressed views are read as uint words (capacity is a multiple of 4).
  const int64_t range = std::min(((hi + 1) * esize - begin + 3) / 4 * 4, buffer.capacity - begin);
  if (range > static_cast<int64_t>(device_.limits().maxStorageBufferRange))
    return absl::OutOfRangeError(absl::StrCat("[vulkan] a view spans ", range,
                                              " bytes; the device binds at most ",
                                              device_.limits().maxStorageBufferRange));
  b.offset = static_cast<VkDeviceSize>(begin);
  b.range = static_cast<VkDeviceSize>(range);
  return std::make_pair(b, at - begin / esize);
}

absl::StatusOr<Recorded> VulkanBackend::resolve_launch(const VkStep& step, const StepLaunch& launch,
                                                       std::vector<int32_t>& params) {
  if (launch.inputs.size() != step.node->inputs.size())
    return absl::InvalidArgumentError(absl::StrCat("[vulkan] ", op_display_name(*step.node),
                                                   " launched with ", launch.inputs.size(),
                                                   " inputs"));
  Recorded rec;
  rec.pipeline = step.pipeline;
  rec.bindings.push_back(Binding{});  // the parameters, filled at submit
  absl::StatusOr<std::pair<Binding, int64_t>> out = window(launch.out);
  if (!out.ok()) return out.status();
  rec.bindings.push_back(out->first);
  const gpu::InputLayout ol = gpu::output_layout(launch.out, out->second);
  std::vector<gpu::InputLayout> inputs;
  for (size_t i = 0; i < launch.inputs.size(); ++i) {
    absl::StatusOr<std::pair<Binding, int64_t>> in = window(launch.inputs[i]);
    if (!in.ok()) return in.status();
    rec.bindings.push_back(in->first);
    inputs.push_back(gpu::input_layout(*step.node, static_cast<int>(i), launch.inputs[i],
                                       in->second, step.code.rank));
  }
  const uint64_t max_groups = device_.limits().maxComputeWorkGroupCount[0];
  for (const Box& box : launch.boxes) {
    const int64_t items = gpu::work_items(step.code, box);
    if (items == 0) continue;
    const int32_t first = static_cast<int32_t>(params.size());
    if (absl::Status st = gpu::append_glsl_params(ol, box, items, step.code.depth, inputs, params);
        !st.ok())
      return absl::OutOfRangeError(
          absl::StrCat("[vulkan] ", op_display_name(*step.node), ": ", st.message()));
    const uint64_t groups = std::min<uint64_t>(
        (static_cast<uint64_t>(items) + gpu::kGlslLocalSize - 1) / gpu::kGlslLocalSize, max_groups);
    rec.dispatches.emplace_back(first, static_cast<uint32_t>(groups));
  }
  return rec;
}

std::vector<StepLaunch> VulkanBackend::split_wide_weights(const VkStep& step, const StepLaunch& launch,
                                                          SplitLaunches& split) const {
  if (step.node->kind != OpKind::Linear || launch.inputs.size() != 2 || !is_quantized(launch.inputs[1].dtype) ||
      launch.inputs[1].extent.rank() != 2)
    return {launch};
  const KernelInput& w = launch.inputs[1];
  const int64_t row_bytes = dtype_bytes(w.dtype, w.extent.extent(1));
  const int64_t align = static_cast<int64_t>(std::max<VkDeviceSize>(device_.limits().minStorageBufferOffsetAlignment, 4));
  const int64_t room = static_cast<int64_t>(device_.limits().maxStorageBufferRange) - align - 4;  // window rounding
  if (w.extent.extent(0) * row_bytes <= room || row_bytes > room) return {launch};  // fits, or never will (window says)
  const int64_t rows = room / row_bytes;
  std::vector<StepLaunch> parts;
  for (const Box& box : launch.boxes) {
    const int last = box.rank() - 1;
    for (int64_t first = box.begin(last); first < box.end(last); first += rows) {
      const int64_t end = std::min(first + rows, box.end(last));
      std::array<KernelInput, 2>& in = split.inputs.emplace_back(std::array<KernelInput, 2>{launch.inputs[0], w});
      in[1].data = static_cast<std::byte*>(w.data) + (first - w.extent.begin(0)) * row_bytes;
      in[1].extent = Box{{first, end}, {w.extent.begin(1), w.extent.end(1)}};
      Box& sub = split.boxes.emplace_back(box);
      sub[last] = Interval(first, end);
      parts.push_back(StepLaunch{launch.step, std::span<const KernelInput>(in.data(), 2), launch.out,
                                 std::span<const Box>(&sub, 1)});
    }
  }
  return parts;
}

absl::Status VulkanBackend::reserve(size_t sets, size_t descriptors, size_t param_bytes) {
  VkDevice d = device_.device();
  if (pool_ == VK_NULL_HANDLE || sets > pool_sets_ || descriptors > pool_descriptors_) {
    if (pool_ != VK_NULL_HANDLE) vkDestroyDescriptorPool(d, pool_, nullptr);
    pool_ = VK_NULL_HANDLE;
    pool_sets_ = std::max(sets, 2 * pool_sets_);
    pool_descriptors_ = std::max(descriptors, 2 * pool_descriptors_);
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                              static_cast<uint32_t>(pool_descriptors_)};
    VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    info.maxSets = static_cast<uint32_t>(pool_sets_);
    info.poolSizeCount = 1;
    info.pPoolSizes = &size;
    if (VkResult r = vkCreateDescriptorPool(d, &info, nullptr, &pool_); r != VK_SUCCESS)
      return absl::ResourceExhaustedError(vk_error("vkCreateDescriptorPool", r));
  } else {
    vkResetDescriptorPool(d, pool_, 0);
  }
  return grow(params_, static_cast<int64_t>(param_bytes), vulkan::Device::Use::kParams);
}

// Records the resolved launches into the command buffer and submits it (the queue is idle).
absl::Status VulkanBackend::submit(std::vector<Recorded>& recorded,
                                   const std::vector<int32_t>& params) {
  if (recorded.empty()) return absl::OkStatus();
  size_t descriptors = 0;
  for (const Recorded& rec : recorded) descriptors += rec.bindings.size();
  const size_t param_bytes = std::max<size_t>(params.size() * sizeof(int32_t), 4);
  if (absl::Status st = reserve(recorded.size(), descriptors, param_bytes); !st.ok()) return st;
  std::memcpy(params_.mapped, params.data(), params.size() * sizeof(int32_t));
  VkDevice d = device_.device();
  std::vector<VkDescriptorSet> sets(recorded.size());
  for (size_t i = 0; i < recorded.size(); ++i) {
    Recorded& rec = recorded[i];
    rec.bindings[0] = Binding{0, params_.buffer, 0, static_cast<VkDeviceSize>(param_bytes)};
    VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    alloc.descriptorPool = pool_;
    alloc.descriptorSetCount = 1;
    alloc.pSetLayouts = &rec.pipeline->set_layout;
    if (VkResult r = vkAllocateDescriptorSets(d, &alloc, &sets[i]); r != VK_SUCCESS)
      return absl::ResourceExhaustedError(vk_error("vkAllocateDescriptorSets", r));
    std::vector<VkDescriptorBufferInfo> infos(rec.bindings.size());
    std::vector<VkWriteDescriptorSet> writes(rec.bindings.size());
    for (size_t b = 0; b < rec.bindings.size(); ++b) {
      infos[b] =
          VkDescriptorBufferInfo{rec.bindings[b].vk, rec.bindings[b].offset, rec.bindings[b].range};
      writes[b] = VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
      writes[b].dstSet = sets[i];
      writes[b].dstBinding = static_cast<uint32_t>(b);
      writes[b].descriptorCount = 1;
      writes[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[b].pBufferInfo = &infos[b];
    }
    vkUpdateDescriptorSets(d, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  }
  if (absl::Status st = begin_commands(); !st.ok()) return st;
  for (size_t i = 0; i < recorded.size(); ++i) {
    const Recorded& rec = recorded[i];
    if (rec.barrier)
      barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
              VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    vkCmdBindPipeline(command_, VK_PIPELINE_BIND_POINT_COMPUTE, rec.pipeline->pipeline);
    vkCmdBindDescriptorSets(command_, VK_PIPELINE_BIND_POINT_COMPUTE, rec.pipeline->layout, 0, 1,
                            &sets[i], 0, nullptr);
    for (const auto& [first, groups] : rec.dispatches) {
      vkCmdPushConstants(command_, rec.pipeline->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                         sizeof(int32_t), &first);
      vkCmdDispatch(command_, groups, 1, 1);
    }
  }
  barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
          VK_ACCESS_HOST_READ_BIT);  // copy_out reads the mapped memory
  return end_and_submit();
}

absl::Status VulkanBackend::grow(DeviceBuffer& buffer, int64_t bytes, vulkan::Device::Use use) {
  if (bytes <= buffer.bytes) return absl::OkStatus();
  const int64_t grown = std::max(bytes, 2 * buffer.bytes);  // before destroy() resets the size
  device_.destroy(buffer);
  absl::StatusOr<DeviceBuffer> b = device_.make_buffer(grown, use);
  if (!b.ok()) return b.status();
  buffer = *b;
  return absl::OkStatus();
}

// The command buffer, reset and begun for one submission (the queue is idle).
absl::Status VulkanBackend::begin_commands() {
  vkResetCommandBuffer(command_, 0);
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  if (VkResult r = vkBeginCommandBuffer(command_, &begin); r != VK_SUCCESS)
    return absl::InternalError(vk_error("vkBeginCommandBuffer", r));
  return absl::OkStatus();
}

void VulkanBackend::barrier(VkPipelineStageFlags src_stage, VkAccessFlags src_access, VkPipelineStageFlags dst_stage,
                            VkAccessFlags dst_access) {
  VkMemoryBarrier m{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  m.srcAccessMask = src_access;
  m.dstAccessMask = dst_access;
  vkCmdPipelineBarrier(command_, src_stage, dst_stage, 0, 1, &m, 0, nullptr, 0, nullptr);
}

// Ends the command buffer and submits it with the fence (wait() waits for it).
absl::Status VulkanBackend::end_and_submit() {
  if (VkResult r = vkEndCommandBuffer(command_); r != VK_SUCCESS)
    return absl::InternalError(vk_error("vkEndCommandBuffer", r));
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &command_;
  if (VkResult r = vkQueueSubmit(device_.queue(), 1, &submit, fence_); r != VK_SUCCESS)
    return absl::InternalError(vk_error("vkQueueSubmit", r));
  in_flight_ = true;
  return absl::OkStatus();
}

absl::Status VulkanBackend::run(const PreparedPlan& prepared, std::span<const StepLaunch> launches,
                                std::span<std::byte>) {
  const auto* plan = dynamic_cast<const VkPreparedPlan*>(&prepared);
  if (plan == nullptr)
    return absl::InvalidArgumentError("[vulkan] plan prepared by another backend");
  last_failed_step_ = -1;
  if (absl::Status st = wait(); !st.ok())
    return st;  // the command buffer, pool and parameters are reused
  std::vector<Recorded> recorded;
  std::vector<int32_t> params;
  SplitLaunches split;
  absl::flat_hash_set<uint64_t> read, written;  // buffers touched since the last barrier
  absl::Status failed;
  for (const StepLaunch& launch : launches) {
    if (launch.step < 0 || static_cast<size_t>(launch.step) >= plan->steps.size()) {
      failed = absl::InvalidArgumentError(
          absl::StrCat("[vulkan] step ", launch.step, " not in the plan"));
    } else {
      const VkStep& step = plan->steps[static_cast<size_t>(launch.step)];
      for (const StepLaunch& part : split_wide_weights(step, launch, split)) {
        absl::StatusOr<Recorded> rec = resolve_launch(step, part, params);
        if (!rec.ok()) {
          failed = rec.status();
          break;
        }
        if (rec->dispatches.empty()) continue;
        const uint64_t out = rec->bindings[1].buffer;
        bool hazard = written.contains(out) || read.contains(out);
        for (size_t b = 2; b < rec->bindings.size(); ++b)
          hazard = hazard || written.contains(rec->bindings[b].buffer);
        if (hazard) read.clear(), written.clear();
        rec->barrier = hazard;
        for (size_t b = 2; b < rec->bindings.size(); ++b) read.insert(rec->bindings[b].buffer);
        written.insert(out);
        recorded.push_back(std::move(*rec));
      }
    }
    if (!failed.ok()) {
      last_failed_step_ = launch.step;  // the launches before it still run
      break;
    }
  }
  absl::Status st = submit(recorded, params);
  if (st.ok() && !failed.ok()) st = wait();
  if (!failed.ok()) return failed;
  if (!st.ok()) {
    last_failed_step_ = launches.empty() ? -1 : launches.front().step;
    return st;
  }
  stats_.launches += static_cast<int64_t>(launches.size());
  return absl::OkStatus();
}

Backend* create(char* error, size_t error_size) {
  try {
    auto backend = std::make_unique<VulkanBackend>();
    if (absl::Status st = backend->open(); !st.ok()) {
      std::snprintf(error, error_size, "%s", std::string(st.message()).c_str());
      return nullptr;
    }
    return backend.release();
  } catch (const std::exception& e) {  // never throw across the plugin boundary
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}

const TesseraBackendPlugin kPlugin = {TESSERA_BACKEND_ABI_VERSION, "vulkan", &create};

}  // namespace
}  // namespace tessera

extern "C" __attribute__((visibility("default"))) const TesseraBackendPlugin*
tessera_backend_plugin(void) {
  return &tessera::kPlugin;
}
