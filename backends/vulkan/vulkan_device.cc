#include "backends/vulkan/vulkan_device.h"

#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "backends/gpu/device_copies.h"
#include "backends/vulkan/glsl_compiler.h"

namespace tessera::vulkan {

std::string vk_error(const char* what, VkResult result) {
  return absl::StrCat("[vulkan] ", what, " failed (VkResult ", static_cast<int>(result), ")");
}

namespace {

// SPIR-V words from a cache file, or empty when it is missing or not SPIR-V.
std::vector<uint32_t> read_spirv(const std::filesystem::path& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return {};
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 20 || bytes.size() % 4 != 0) return {};
  std::vector<uint32_t> words(bytes.size() / 4);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words[0] == 0x07230203u ? words : std::vector<uint32_t>{};
}

// Written to a temporary name and renamed: readers see a whole file or none. Failures only cost
// compile time later.
void write_spirv(const std::filesystem::path& file, const std::vector<uint32_t>& words) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  const std::filesystem::path tmp = file.string() + ".tmp" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    f.write(reinterpret_cast<const char*>(words.data()),
            static_cast<std::streamsize>(words.size() * 4));
    if (!f) return;
  }
  std::filesystem::rename(tmp, file, ec);
}

// The process's Vulkan instance, made by the first open() that succeeds and never destroyed:
// destroying the last instance makes the loader unload the driver, and NVIDIA's cannot be
// loaded into a process a second time ("libnvidia-tls.so: cannot allocate memory in static TLS
// block", so every later backend failed with VK_ERROR_INCOMPATIBLE_DRIVER; seen on an H100).
// Every Device makes its own VkDevice from it. `api` gets the version the instance asked for.
absl::StatusOr<VkInstance> process_instance(uint32_t* api) {
  static std::mutex mutex;
  static VkInstance instance = VK_NULL_HANDLE;
  static uint32_t version = VK_API_VERSION_1_0;
  std::lock_guard<std::mutex> lock(mutex);
  if (instance == VK_NULL_HANDLE) {
    uint32_t instance_version = VK_API_VERSION_1_0;
    vkEnumerateInstanceVersion(&instance_version);
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "tessera";
    app.apiVersion = instance_version >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2 : VK_API_VERSION_1_0;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    if (VkResult r = vkCreateInstance(&info, nullptr, &instance); r != VK_SUCCESS) {
      instance = VK_NULL_HANDLE;
      return absl::UnavailableError(vk_error("vkCreateInstance (no Vulkan driver?)", r));
    }
    version = app.apiVersion;
  }
  *api = version;
  return instance;
}

}  // namespace

Device::~Device() {
  if (device_ != VK_NULL_HANDLE) {
    vkDeviceWaitIdle(device_);
    for (auto& [hash, p] : pipelines_) {
      vkDestroyPipeline(device_, p.pipeline, nullptr);
      vkDestroyShaderModule(device_, p.module, nullptr);
    }
    for (auto& [n, l] : layouts_) {
      vkDestroyPipelineLayout(device_, l.second, nullptr);
      vkDestroyDescriptorSetLayout(device_, l.first, nullptr);
    }
    vkDestroyDevice(device_, nullptr);
  }
}

absl::Status Device::open() {
  uint32_t api = VK_API_VERSION_1_0;
  absl::StatusOr<VkInstance> instance = process_instance(&api);
  if (!instance.ok()) return instance.status();
  instance_ = *instance;
  uint32_t count = 0;
  vkEnumeratePhysicalDevices(instance_, &count, nullptr);
  std::vector<VkPhysicalDevice> all(count);
  vkEnumeratePhysicalDevices(instance_, &count, all.data());
  all.resize(count);
  // Devices with a compute queue, each with the first such family.
  std::vector<std::pair<VkPhysicalDevice, uint32_t>> compute;
  for (VkPhysicalDevice d : all) {
    uint32_t families = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(d, &families, nullptr);
    std::vector<VkQueueFamilyProperties> props(families);
    vkGetPhysicalDeviceQueueFamilyProperties(d, &families, props.data());
    for (uint32_t f = 0; f < families; ++f)
      if (props[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
        compute.emplace_back(d, f);
        break;
      }
  }
  if (compute.empty())
    return absl::UnavailableError("[vulkan] no Vulkan device with a compute queue");
  size_t pick = 0;
  if (const char* env = std::getenv("TESSERA_VULKAN_DEVICE"))
    pick = static_cast<size_t>(std::atoi(env));
  if (pick >= compute.size())
    return absl::UnavailableError(absl::StrCat("[vulkan] TESSERA_VULKAN_DEVICE=", pick,
                                               " but only ", compute.size(), " devices"));
  physical_ = compute[pick].first;
  queue_family_ = compute[pick].second;

  VkPhysicalDeviceProperties props{};
  vkGetPhysicalDeviceProperties(physical_, &props);
  limits_ = props.limits;
  std::string driver = absl::StrCat("driver ", props.driverVersion);
  if (api >= VK_API_VERSION_1_2 && props.apiVersion >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceDriverProperties driver_props{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props2.pNext = &driver_props;
    vkGetPhysicalDeviceProperties2(physical_, &props2);
    driver = absl::StrCat(driver_props.driverName, " ", driver_props.driverInfo);
  }
  description_ = absl::StrCat("vulkan: ", props.deviceName, " (", driver, ")");
  cache_key_ = absl::StrCat(props.deviceName, " ", props.vendorID, ":", props.deviceID, " ",
                            props.driverVersion, " ", driver);

  // Memory types. Tensors live in device-local memory. Where that memory is also host-visible,
  // coherent and cached (unified memory: lavapipe, integrated GPUs) buffers are mapped and
  // copies are memcpy; otherwise (a discrete GPU, whose host-visible device memory is an
  // uncached window over PCIe: host reads from it ran at ~30 MB/s on an H100, a 3 MB result
  // took 110 ms to read back) copies go through a staging buffer in cached host memory.
  // TESSERA_VULKAN_STAGING=1 takes the staging path everywhere (the tests run it on lavapipe).
  // Parameters keep host-visible coherent memory, device-local too where there is such (BAR).
  VkPhysicalDeviceMemoryProperties memory{};
  vkGetPhysicalDeviceMemoryProperties(physical_, &memory);
  const VkMemoryPropertyFlags host =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const VkMemoryPropertyFlags unified = host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  // The first type with all of `need`, the first with `prefer` too if any; -1 if none.
  auto memory_type = [&](VkMemoryPropertyFlags need, VkMemoryPropertyFlags prefer) {
    int best = -1;
    for (uint32_t t = 0; t < memory.memoryTypeCount; ++t) {
      const VkMemoryPropertyFlags f = memory.memoryTypes[t].propertyFlags;
      if ((f & need) != need) continue;
      if (best < 0 || ((f & prefer) == prefer && (memory.memoryTypes[best].propertyFlags & prefer) != prefer))
        best = static_cast<int>(t);
    }
    return best;
  };
  const int params = memory_type(host, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  const int staging = memory_type(host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  const int device_local = memory_type(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, unified);
  if (params < 0 || staging < 0)
    return absl::UnavailableError("[vulkan] the device has no host-visible coherent memory");
  params_type_ = static_cast<uint32_t>(params);
  staging_type_ = static_cast<uint32_t>(staging);
  const char* force = std::getenv("TESSERA_VULKAN_STAGING");
  const bool staged = force != nullptr && std::string(force) == "1";
  if (device_local < 0) {  // no device-local memory: host memory, mapped
    storage_type_ = params_type_;
    storage_mapped_ = !staged;
  } else {
    storage_type_ = static_cast<uint32_t>(device_local);
    storage_mapped_ = !staged && (memory.memoryTypes[storage_type_].propertyFlags & unified) == unified;
  }
  if (!storage_mapped_) absl::StrAppend(&description_, " [staged copies]");

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue.queueFamilyIndex = queue_family_;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  VkDeviceCreateInfo device{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  device.queueCreateInfoCount = 1;
  device.pQueueCreateInfos = &queue;
  if (VkResult r = vkCreateDevice(physical_, &device, nullptr, &device_); r != VK_SUCCESS)
    return absl::UnavailableError(vk_error("vkCreateDevice", r));
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> Device::make_buffer(int64_t bytes, Use use) {
  const uint32_t type = use == Use::kStorage ? storage_type_ : use == Use::kParams ? params_type_ : staging_type_;
  const bool map = use != Use::kStorage || storage_mapped_;
  DeviceBuffer b;
  b.bytes = bytes;
  b.capacity = std::max<int64_t>((bytes + 3) / 4 * 4, 4);
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = static_cast<VkDeviceSize>(b.capacity);
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (VkResult r = vkCreateBuffer(device_, &info, nullptr, &b.buffer); r != VK_SUCCESS)
    return absl::ResourceExhaustedError(vk_error("vkCreateBuffer", r));
  VkMemoryRequirements req{};
  vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  if (!(req.memoryTypeBits & (1u << type))) {
    destroy(b);
    return absl::ResourceExhaustedError(
        absl::StrCat("[vulkan] buffers of this use cannot live in memory type ", type, " on this device"));
  }
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = type;
  VkResult r = vkAllocateMemory(device_, &alloc, nullptr, &b.memory);
  if (r == VK_SUCCESS) r = vkBindBufferMemory(device_, b.buffer, b.memory, 0);
  void* mapped = nullptr;
  if (r == VK_SUCCESS && map) r = vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &mapped);
  if (r != VK_SUCCESS) {
    destroy(b);
    return absl::ResourceExhaustedError(vk_error("allocating buffer memory", r));
  }
  b.mapped = static_cast<std::byte*>(mapped);
  return b;
}

void Device::destroy(DeviceBuffer& b) {
  if (b.buffer != VK_NULL_HANDLE) vkDestroyBuffer(device_, b.buffer, nullptr);
  if (b.memory != VK_NULL_HANDLE) vkFreeMemory(device_, b.memory, nullptr);  // unmaps
  b = DeviceBuffer{};
}

absl::StatusOr<std::pair<VkDescriptorSetLayout, VkPipelineLayout>> Device::layouts(
    uint32_t bindings) {
  if (auto it = layouts_.find(bindings); it != layouts_.end()) return it->second;
  std::vector<VkDescriptorSetLayoutBinding> list(bindings);
  for (uint32_t i = 0; i < bindings; ++i) {
    list[i].binding = i;
    list[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    list[i].descriptorCount = 1;
    list[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set_info.bindingCount = bindings;
  set_info.pBindings = list.data();
  VkDescriptorSetLayout set = VK_NULL_HANDLE;
  if (VkResult r = vkCreateDescriptorSetLayout(device_, &set_info, nullptr, &set); r != VK_SUCCESS)
    return absl::InternalError(vk_error("vkCreateDescriptorSetLayout", r));
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(int32_t)};
  VkPipelineLayoutCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  info.setLayoutCount = 1;
  info.pSetLayouts = &set;
  info.pushConstantRangeCount = 1;
  info.pPushConstantRanges = &push;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  if (VkResult r = vkCreatePipelineLayout(device_, &info, nullptr, &layout); r != VK_SUCCESS) {
    vkDestroyDescriptorSetLayout(device_, set, nullptr);
    return absl::InternalError(vk_error("vkCreatePipelineLayout", r));
  }
  return layouts_[bindings] = {set, layout};
}

absl::StatusOr<Pipeline> Device::make_pipeline(const std::vector<uint32_t>& spirv,
                                               uint32_t bindings) {
  absl::StatusOr<std::pair<VkDescriptorSetLayout, VkPipelineLayout>> l = layouts(bindings);
  if (!l.ok()) return l.status();
  Pipeline p;
  p.set_layout = l->first;
  p.layout = l->second;
  p.bindings = bindings;
  VkShaderModuleCreateInfo module{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module.codeSize = spirv.size() * 4;
  module.pCode = spirv.data();
  if (VkResult r = vkCreateShaderModule(device_, &module, nullptr, &p.module); r != VK_SUCCESS)
    return absl::InternalError(vk_error("vkCreateShaderModule", r));
  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = p.module;
  info.stage.pName = "main";
  info.layout = p.layout;
  if (VkResult r =
          vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &p.pipeline);
      r != VK_SUCCESS) {
    vkDestroyShaderModule(device_, p.module, nullptr);
    return absl::InternalError(vk_error("vkCreateComputePipelines", r));
  }
  return p;
}

absl::StatusOr<const Pipeline*> Device::pipeline(const std::string& glsl, uint32_t bindings,
                                                 BackendStats& stats) {
  if (bindings > limits_.maxPerStageDescriptorStorageBuffers)
    return absl::UnimplementedError(absl::StrCat("[vulkan] a kernel with ", bindings,
                                                 " buffers (the device binds ",
                                                 limits_.maxPerStageDescriptorStorageBuffers, ")"));
  const std::string key = absl::StrCat(glsl, "\n// ", cache_key_);
  const uint64_t hash = XXH3_64bits(key.data(), key.size());
  if (auto it = pipelines_.find(hash); it != pipelines_.end()) {
    stats.kernels_reused += 1;
    return &it->second;
  }
  const std::filesystem::path file =
      gpu::kernel_cache_dir("vulkan") / absl::StrCat(absl::Hex(hash, absl::kZeroPad16), ".spv");
  if (std::vector<uint32_t> spirv = read_spirv(file); !spirv.empty()) {
    if (absl::StatusOr<Pipeline> p = make_pipeline(spirv, bindings); p.ok()) {
      stats.kernels_loaded += 1;
      return &(pipelines_[hash] = *p);
    }
  }
  absl::StatusOr<std::vector<uint32_t>> spirv = compile_glsl(glsl);
  if (!spirv.ok()) return spirv.status();
  absl::StatusOr<Pipeline> p = make_pipeline(*spirv, bindings);
  if (!p.ok()) return p.status();
  stats.kernels_compiled += 1;
  write_spirv(file, *spirv);
  return &(pipelines_[hash] = *p);
}

}  // namespace tessera::vulkan
