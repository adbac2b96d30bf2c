// The "cuda" backend plugin: the kernels of backends/gpu/codegen.h in CUDA C, compiled to PTX by
// NVRTC (linked), loaded and launched through the driver API, which is opened at run time with
// dlopen("libcuda.so.1"): without a driver (or a GPU) the plugin's create() fails with a clear
// message and the backend is absent. Buffers are device pointers (CUdeviceptr), so views carry
// real device addresses. PTX is cached on disk like the OpenCL binaries
// (<cache>/cuda/<xxh64 of source, NVRTC version and device>.ptx); TESSERA_CUDA_DEVICE=N picks a GPU.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "backends/cuda/nvrtc_compile.h"
#include "backends/gpu/codegen.h"
#include "backends/gpu/device_copies.h"

namespace tessera {
namespace {

// The driver entry points the plugin uses, resolved from libcuda.so.1.
struct Driver {
  void* library = nullptr;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  CUresult (*cuCtxSynchronize)();

  // "" when every symbol resolved, else what is missing.
  std::string open() {
    library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return absl::StrCat("[cuda] no CUDA driver: ", dlerror());
    std::string missing;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, name));
      if (fn == nullptr) absl::StrAppend(&missing, " ", name);
    };
    get(cuInit, "cuInit");
    get(cuDeviceGetCount, "cuDeviceGetCount");
    get(cuDeviceGet, "cuDeviceGet");
    get(cuDeviceGetName, "cuDeviceGetName");
    get(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    get(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    get(cuCtxSetCurrent, "cuCtxSetCurrent");
    get(cuMemAlloc, "cuMemAlloc_v2");
    get(cuMemFree, "cuMemFree_v2");
    get(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    get(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    get(cuModuleLoadData, "cuModuleLoadData");
    get(cuModuleUnload, "cuModuleUnload");
    get(cuModuleGetFunction, "cuModuleGetFunction");
    get(cuLaunchKernel, "cuLaunchKernel");
    get(cuCtxSynchronize, "cuCtxSynchronize");
    return missing.empty() ? "" : absl::StrCat("[cuda] the driver lacks:", missing);
  }
};

std::string cu_error(const char* what, CUresult r) { return absl::StrCat("[cuda] ", what, " failed (CUresult ", static_cast<int>(r), ")"); }

struct CudaStep {
  CUfunction function = nullptr;
  gpu::GeneratedKernel code;
  const Node* node = nullptr;
};

class CudaPreparedPlan final : public PreparedPlan {
 public:
  std::vector<CudaStep> steps;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() : Backend(/*host_addressable=*/false) {}
  ~CudaBackend() override {
    if (context_ == nullptr) return;
    driver_.cuCtxSetCurrent(context_);
    for (auto& [ptr, bytes] : buffers_) driver_.cuMemFree(ptr);
    for (auto& [hash, module] : modules_) driver_.cuModuleUnload(module.module);
    driver_.cuDevicePrimaryCtxRelease(device_);
  }

  std::string open() {
    if (std::string why = driver_.open(); !why.empty()) return why;
    if (CUresult r = driver_.cuInit(0); r != CUDA_SUCCESS) return cu_error("cuInit (no GPU?)", r);
    int count = 0;
    driver_.cuDeviceGetCount(&count);
    if (count == 0) return "[cuda] no CUDA device";
    int pick = 0;
    if (const char* env = std::getenv("TESSERA_CUDA_DEVICE")) pick = std::atoi(env);
    if (pick < 0 || pick >= count) return absl::StrCat("[cuda] TESSERA_CUDA_DEVICE=", pick, " but ", count, " devices");
    if (CUresult r = driver_.cuDeviceGet(&device_, pick); r != CUDA_SUCCESS) return cu_error("cuDeviceGet", r);
    if (CUresult r = driver_.cuDevicePrimaryCtxRetain(&context_, device_); r != CUDA_SUCCESS)
      return cu_error("cuDevicePrimaryCtxRetain", r);
    driver_.cuCtxSetCurrent(context_);
    char name[256] = {};
    driver_.cuDeviceGetName(name, sizeof(name), device_);
    device_name_ = name;
    description_ = absl::StrCat("cuda: ", device_name_, " (NVRTC ", cuda::nvrtc_version(), ")");
    return "";
  }

  std::string_view name() const override { return "cuda"; }
  absl::Status supports(const Graph& graph, const Node& node) const override { return gpu::generate_cuda(graph, node).status(); }

  absl::StatusOr<BufferHandle> allocate(int64_t size_bytes) override {
    if (size_bytes < 0) return absl::InvalidArgumentError(absl::StrCat("[cuda] allocate of ", size_bytes, " bytes"));
    driver_.cuCtxSetCurrent(context_);
    CUdeviceptr ptr = 0;
    if (CUresult r = driver_.cuMemAlloc(&ptr, static_cast<size_t>(std::max<int64_t>(size_bytes, 4))); r != CUDA_SUCCESS)
      return absl::ResourceExhaustedError(cu_error("cuMemAlloc", r));
    buffers_[ptr] = size_bytes;
    return BufferHandle{static_cast<uint64_t>(ptr)};
  }

  void free(BufferHandle buffer) override {
    auto it = buffers_.find(static_cast<CUdeviceptr>(buffer.id));
    if (it == buffers_.end()) return;
    driver_.cuMemFree(it->first);
    buffers_.erase(it);
  }

  absl::Status copy_in(const BufferRegion& region, const Box& box, const void* host) override {
    return copy(region, box, const_cast<void*>(host), true);
  }
  absl::Status copy_out(const BufferRegion& region, const Box& box, void* host) override { return copy(region, box, host, false); }

  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepare(const Graph& graph, const Plan& plan) override {
    auto prepared = std::make_unique<CudaPreparedPlan>();
    for (const PlanStep& ps : plan.steps) {
      if (ps.node < 0 || ps.node >= graph.size()) return absl::InvalidArgumentError("[cuda] plan of another graph");
      const Node& node = graph.node(ps.node);
      absl::StatusOr<gpu::GeneratedKernel> code = gpu::generate_cuda(graph, node);
      if (!code.ok()) return code.status();
      absl::StatusOr<CUfunction> function = compiled(*code);
      if (!function.ok()) return function.status();
      prepared->steps.push_back(CudaStep{*function, std::move(*code), &node});
    }
    return std::unique_ptr<PreparedPlan>(std::move(prepared));
  }

  absl::Status run(const PreparedPlan& prepared, std::span<const StepLaunch> launches, std::span<std::byte>) override {
    const auto* plan = dynamic_cast<const CudaPreparedPlan*>(&prepared);
    if (plan == nullptr) return absl::InvalidArgumentError("[cuda] plan prepared by another backend");
    driver_.cuCtxSetCurrent(context_);
    last_failed_step_ = -1;
    for (const StepLaunch& launch : launches) {
      if (launch.step < 0 || static_cast<size_t>(launch.step) >= plan->steps.size())
        return absl::InvalidArgumentError(absl::StrCat("[cuda] step ", launch.step, " not in the plan"));
      if (absl::Status st = run_launch(plan->steps[static_cast<size_t>(launch.step)], launch); !st.ok()) {
        last_failed_step_ = launch.step;
        return st;
      }
    }
    stats_.launches += static_cast<int64_t>(launches.size());
    return absl::OkStatus();
  }

  absl::Status synchronize() override {
    driver_.cuCtxSetCurrent(context_);
    const CUresult r = driver_.cuCtxSynchronize();
    return r == CUDA_SUCCESS ? absl::OkStatus() : absl::InternalError(cu_error("cuCtxSynchronize", r));
  }

 private:
  struct Module {
    CUmodule module = nullptr;
    CUfunction function = nullptr;
  };

  // The allocation holding a device address, and the byte offset into it.
  absl::StatusOr<std::pair<CUdeviceptr, int64_t>> resolve(const void* data) const {
    const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(data);
    for (const auto& [ptr, bytes] : buffers_)
      if (address >= ptr && address < ptr + static_cast<CUdeviceptr>(std::max<int64_t>(bytes, 1)))
        return std::make_pair(ptr, static_cast<int64_t>(address - ptr));
    return absl::InvalidArgumentError("[cuda] a view is not device memory of this backend");
  }

  // Box copies as blocking copies of contiguous runs.
  absl::Status copy(const BufferRegion& region, const Box& box, void* host, bool in) {
    auto it = buffers_.find(static_cast<CUdeviceptr>(region.buffer.id));
    if (it == buffers_.end()) return absl::InvalidArgumentError("[cuda] copy with an unknown buffer");
    driver_.cuCtxSetCurrent(context_);
    const CUdeviceptr base = it->first;
    auto* bytes = static_cast<std::byte*>(host);
    return gpu::for_each_box_run("cuda", region, box, it->second, [&](int64_t at, int64_t dense, int64_t n) {
      const CUdeviceptr device = base + static_cast<CUdeviceptr>(at);
      const CUresult r = in ? driver_.cuMemcpyHtoD(device, bytes + dense, static_cast<size_t>(n))
                            : driver_.cuMemcpyDtoH(bytes + dense, device, static_cast<size_t>(n));
      return r == CUDA_SUCCESS ? absl::OkStatus() : absl::InternalError(cu_error(in ? "cuMemcpyHtoD" : "cuMemcpyDtoH", r));
    });
  }

  // The function of a source: from memory, else PTX from the disk cache, else NVRTC (stored).
  absl::StatusOr<CUfunction> compiled(const gpu::GeneratedKernel& code) {
    const std::string key = absl::StrCat(code.source, "\n// ", device_name_, " nvrtc ", cuda::nvrtc_version());
    const uint64_t hash = XXH3_64bits(key.data(), key.size());
    if (auto it = modules_.find(hash); it != modules_.end()) {
      stats_.kernels_reused += 1;
      return it->second.function;
    }
    const std::filesystem::path file = gpu::kernel_cache_dir("cuda") / absl::StrCat(absl::Hex(hash, absl::kZeroPad16), ".ptx");
    std::string ptx;
    if (std::ifstream f(file, std::ios::binary); f) ptx.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (ptx.empty()) {
      absl::StatusOr<std::string> built = cuda::compile_to_ptx(code.source, code.name);
      if (!built.ok()) return built.status();
      ptx = std::move(*built);
      stats_.kernels_compiled += 1;
      std::error_code ec;
      std::filesystem::create_directories(file.parent_path(), ec);
      const std::filesystem::path tmp = file.string() + ".tmp" + std::to_string(getpid());
      if (std::ofstream f(tmp, std::ios::binary); f) f << ptx;
      std::filesystem::rename(tmp, file, ec);
    } else {
      stats_.kernels_loaded += 1;
    }
    driver_.cuCtxSetCurrent(context_);
    Module m;
    if (CUresult r = driver_.cuModuleLoadData(&m.module, ptx.c_str()); r != CUDA_SUCCESS) return absl::InternalError(cu_error("cuModuleLoadData", r));
    if (CUresult r = driver_.cuModuleGetFunction(&m.function, m.module, code.name.c_str()); r != CUDA_SUCCESS) {
      driver_.cuModuleUnload(m.module);
      return absl::InternalError(cu_error("cuModuleGetFunction", r));
    }
    modules_[hash] = m;
    return m.function;
  }

  absl::Status run_launch(const CudaStep& step, const StepLaunch& launch) {
    struct Long8 {
      long long s[8];
    };
    // Argument storage (addresses go into `params`, in the order of codegen.h).
    std::vector<CUdeviceptr> pointers;
    std::vector<long long> scalars;
    std::vector<Long8> vectors;
    pointers.reserve(1 + launch.inputs.size());
    scalars.reserve(4 + 2 * launch.inputs.size());
    vectors.reserve(3 + 2 * launch.inputs.size());  // no reallocation: params point into it
    std::vector<void*> params;
    auto vec = [&](const std::array<int64_t, 8>& v) {
      Long8 x;
      for (int i = 0; i < 8; ++i) x.s[i] = v[static_cast<size_t>(i)];
      vectors.push_back(x);
      params.push_back(&vectors.back());
    };
    auto scalar = [&](int64_t v) {
      scalars.push_back(v);
      params.push_back(&scalars.back());
    };
    absl::StatusOr<std::pair<CUdeviceptr, int64_t>> out = resolve(launch.out.data);
    if (!out.ok()) return out.status();
    const gpu::InputLayout ol = gpu::output_layout(launch.out, out->second / dtype_size(launch.out.dtype));
    pointers.push_back(out->first);
    params.push_back(&pointers.back());
    scalar(ol.base);
    vec(ol.strides);
    const size_t box_param = params.size();  // begin, extent, items: filled per box
    std::array<int64_t, 8> zero{};
    vec(zero);
    vec(zero);
    scalar(0);
    scalar(step.code.depth);
    for (size_t i = 0; i < launch.inputs.size(); ++i) {
      const KernelInput& in = launch.inputs[i];
      // No data: an input the box does not read (concat's other slabs); a null pointer binds.
      absl::StatusOr<std::pair<CUdeviceptr, int64_t>> r = in.data == nullptr ? std::make_pair(CUdeviceptr{0}, int64_t{0}) : resolve(in.data);
      if (!r.ok()) return r.status();
      const gpu::InputLayout l = gpu::input_layout(*step.node, static_cast<int>(i), in, r->second / gpu::address_unit(in.dtype), step.code.rank);
      pointers.push_back(r->first);
      params.push_back(&pointers.back());
      scalar(l.base);
      vec(l.strides);
      scalar(l.red);
      vec(l.shape);
    }
    for (const Box& box : launch.boxes) {
      const int64_t items = gpu::work_items(step.code, box);
      if (items == 0) continue;
      Long8& begin = *static_cast<Long8*>(params[box_param]);
      Long8& extent = *static_cast<Long8*>(params[box_param + 1]);
      for (int d = 0; d < 8; ++d) begin.s[d] = d < box.rank() ? box.begin(d) : 0, extent.s[d] = d < box.rank() ? box.extent(d) : 1;
      *static_cast<long long*>(params[box_param + 2]) = items;
      const unsigned block = step.code.local_size > 0 ? static_cast<unsigned>(step.code.local_size) : 256;  // Tiles: exact
      const unsigned grid = static_cast<unsigned>((items + block - 1) / block);
      if (CUresult r = driver_.cuLaunchKernel(step.function, grid, 1, 1, block, 1, 1, 0, nullptr, params.data(), nullptr);
          r != CUDA_SUCCESS)
        return absl::InternalError(cu_error("cuLaunchKernel", r));
    }
    return absl::OkStatus();
  }

  Driver driver_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string device_name_;
  absl::flat_hash_map<CUdeviceptr, int64_t> buffers_;
  absl::flat_hash_map<uint64_t, Module> modules_;
};

Backend* create(char* error, size_t error_size) {
  try {
    auto backend = std::make_unique<CudaBackend>();
    if (const std::string why = backend->open(); !why.empty()) {
      std::snprintf(error, error_size, "%s", why.c_str());
      return nullptr;
    }
    return backend.release();
  } catch (const std::exception& e) {  // never throw across the plugin boundary
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}

const TesseraBackendPlugin kPlugin = {TESSERA_BACKEND_ABI_VERSION, "cuda", &create};

}  // namespace
}  // namespace tessera

extern "C" __attribute__((visibility("default"))) const TesseraBackendPlugin* tessera_backend_plugin(void) {
  return &tessera::kPlugin;
}
