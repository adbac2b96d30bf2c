// The Vulkan objects of the vulkan plugin: instance, device, queue, buffers and
// compute pipelines (GLSL from backends/gpu/codegen.h, SPIR-V cached in memory and on disk).
// Errors are absl::Status; nothing aborts.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace tessera::vulkan {

// A storage buffer: in device-local memory, mapped for its whole life where that memory is
// also host-visible, coherent and cached (unified memory), else not mapped (copies go through
// a staging buffer); host buffers (parameters, staging) are always mapped.
struct DeviceBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  std::byte* mapped = nullptr;  // nullptr: not host-visible (or not to be read by the host)
  int64_t bytes = 0;     // as asked
  int64_t capacity = 0;  // as made (a multiple of 4, at least 4)
};

// A compute pipeline for shaders with `bindings` storage buffers and one int32 push constant.
struct Pipeline {
  VkShaderModule module = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;  // owned by the device (one per binding count)
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t bindings = 0;
};

class Device {
 public:
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();

  // Opens the first compute-capable device (TESSERA_VULKAN_DEVICE=N picks the N-th); an error
  // when there is none.
  absl::Status open();

  const std::string& description() const { return description_; }
  const VkPhysicalDeviceLimits& limits() const { return limits_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }

  // What a buffer holds: tensors (device-local), dispatch parameters (host-visible, written by
  // the host, read by shaders) or staged copies (host-visible, cached where the device has such
  // memory: the host reads it back).
  enum class Use { kStorage, kParams, kStaging };
  absl::StatusOr<DeviceBuffer> make_buffer(int64_t bytes, Use use = Use::kStorage);
  void destroy(DeviceBuffer& buffer);

  // The pipeline of a GLSL compute shader with `bindings` storage buffers: from memory, else
  // from SPIR-V on disk, else compiled (and stored); counts that in `stats`.
  absl::StatusOr<const Pipeline*> pipeline(const std::string& glsl, uint32_t bindings,
                                           BackendStats& stats);

 private:
  absl::StatusOr<std::pair<VkDescriptorSetLayout, VkPipelineLayout>> layouts(uint32_t bindings);
  absl::StatusOr<Pipeline> make_pipeline(const std::vector<uint32_t>& spirv, uint32_t bindings);

  VkInstance instance_ = VK_NULL_HANDLE;  // the process's (vulkan_device.cc), not destroyed with this
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  uint32_t storage_type_ = 0, params_type_ = 0, staging_type_ = 0;  // memory type indices
  bool storage_mapped_ = true;  // storage buffers are mapped (unified memory, no staging forced)
  VkPhysicalDeviceLimits limits_{};
  std::string description_, cache_key_;
  absl::flat_hash_map<uint32_t, std::pair<VkDescriptorSetLayout, VkPipelineLayout>> layouts_;
  absl::node_hash_map<uint64_t, Pipeline> pipelines_;  // stable addresses: plans point into it
};

// Where SPIR-V is cached: TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else
// ~/.cache/tessera; then "vulkan".
std::filesystem::path cache_dir();

std::string vk_error(const char* what, VkResult result);

}  // namespace tessera::vulkan
