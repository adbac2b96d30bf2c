// The "opencl" backend plugin: kernels generated per op (backends/gpu/codegen.h), compiled once
// per kernel source and device, cached in memory and on disk, run on an in-order queue of the
// first OpenCL device (TESSERA_OPENCL_DEVICE=N picks another). Tested for real on PoCL.
//
// Device addresses: buffer k spans [k << 40, (k << 40) + size) of a virtual space (OpenCL has no
// device pointers); a view's data is base + byte offset and is resolved to (cl_mem, offset).
// Disk cache: <dir>/opencl/<xxh64 of source, device and driver>.bin, where dir is
// TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else ~/.cache/tessera; a missing or
// unwritable cache only costs compile time.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "backends/gpu/codegen.h"
#include "backends/gpu/device_copies.h"
#include "engine/op_def.h"

namespace tessera {
namespace {

constexpr int kAddressBits = 40;

std::string cl_error(const char* what, cl_int code) { return absl::StrCat("[opencl] ", what, " failed (error ", code, ")"); }

std::string device_string(cl_device_id device, cl_device_info info) {
  size_t size = 0;
  clGetDeviceInfo(device, info, 0, nullptr, &size);
  std::string s(size, '\0');
  clGetDeviceInfo(device, info, size, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

struct ClStep {
  cl_kernel kernel = nullptr;  // owned by the backend's kernel cache
  gpu::GeneratedKernel code;
  const Node* node = nullptr;
};

class ClPreparedPlan final : public PreparedPlan {
 public:
  std::vector<ClStep> steps;
};

class OpenClBackend final : public Backend {
 public:
  OpenClBackend() : Backend(/*host_addressable=*/false) {}
  ~OpenClBackend() override {
    for (auto& [base, buffer] : buffers_) clReleaseMemObject(buffer.mem);
    for (auto& [hash, compiled] : kernels_) {
      clReleaseKernel(compiled.kernel);
      clReleaseProgram(compiled.program);
    }
    if (queue_) clReleaseCommandQueue(queue_);
    if (context_) clReleaseContext(context_);
  }

  // Opens the device; an error message when there is none (the backend is then absent).
  std::string open() {
    // PoCL compiles into a cache directory of its own; give it a writable one.
    if (std::getenv("POCL_CACHE_DIR") == nullptr) {
      std::error_code ec;
      const std::filesystem::path pocl = gpu::kernel_cache_dir("pocl");
      std::filesystem::create_directories(pocl, ec);
      setenv("POCL_CACHE_DIR", pocl.c_str(), 0);
    }
    cl_uint platforms = 0;
    if (clGetPlatformIDs(0, nullptr, &platforms) != CL_SUCCESS || platforms == 0) return "[opencl] no OpenCL platform";
    std::vector<cl_platform_id> ids(platforms);
    clGetPlatformIDs(platforms, ids.data(), nullptr);
    std::vector<cl_device_id> devices;
    for (cl_platform_id p : ids) {
      cl_uint n = 0;
      if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
      const size_t first = devices.size();
      devices.resize(first + n);
      clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, devices.data() + first, nullptr);
    }
    if (devices.empty()) return "[opencl] no OpenCL device";
    size_t pick = 0;
    if (const char* env = std::getenv("TESSERA_OPENCL_DEVICE")) pick = static_cast<size_t>(std::atoi(env));
    if (pick >= devices.size()) return absl::StrCat("[opencl] TESSERA_OPENCL_DEVICE=", pick, " but only ", devices.size(), " devices");
    device_ = devices[pick];
    cl_int err = CL_SUCCESS;
    context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
    if (err != CL_SUCCESS) return cl_error("clCreateContext", err);
    queue_ = clCreateCommandQueue(context_, device_, 0, &err);
    if (err != CL_SUCCESS) return cl_error("clCreateCommandQueue", err);
    device_name_ = device_string(device_, CL_DEVICE_NAME);
    driver_ = device_string(device_, CL_DRIVER_VERSION);
    description_ = absl::StrCat("opencl: ", device_name_, " (", driver_, ")");
    return "";
  }

  std::string_view name() const override { return "opencl"; }

  absl::Status supports(const Graph& graph, const Node& node) const override {
    return gpu::generate_opencl(graph, node).status();
  }

  absl::StatusOr<BufferHandle> allocate(int64_t size_bytes) override {
    if (size_bytes < 0 || size_bytes >= (int64_t{1} << kAddressBits))
      return absl::InvalidArgumentError(absl::StrCat("[opencl] allocate of ", size_bytes, " bytes"));
    cl_int err = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_WRITE, static_cast<size_t>(std::max<int64_t>(size_bytes, 4)), nullptr, &err);
    if (err != CL_SUCCESS) return absl::ResourceExhaustedError(cl_error("clCreateBuffer", err));
    const uint64_t base = (next_++) << kAddressBits;
    buffers_[base] = Buffer{mem, size_bytes};
    return BufferHandle{base};
  }

  void free(BufferHandle buffer) override {
    auto it = buffers_.find(buffer.id);
    if (it == buffers_.end()) return;
    clReleaseMemObject(it->second.mem);
    buffers_.erase(it);
  }

  absl::Status copy_in(const BufferRegion& region, const Box& box, const void* host) override {
    return copy(region, box, const_cast<void*>(host), /*in=*/true);
  }
  absl::Status copy_out(const BufferRegion& region, const Box& box, void* host) override {
    return copy(region, box, host, /*in=*/false);
  }

  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepare(const Graph& graph, const Plan& plan) override {
    auto prepared = std::make_unique<ClPreparedPlan>();
    for (const PlanStep& ps : plan.steps) {
      if (ps.node < 0 || ps.node >= graph.size()) return absl::InvalidArgumentError("[opencl] plan of another graph");
      const Node& node = graph.node(ps.node);
      absl::StatusOr<gpu::GeneratedKernel> code = gpu::generate_opencl(graph, node);
      if (!code.ok()) return code.status();
      absl::StatusOr<cl_kernel> kernel = compiled(*code);
      if (!kernel.ok()) return kernel.status();
      prepared->steps.push_back(ClStep{*kernel, std::move(*code), &node});
    }
    return std::unique_ptr<PreparedPlan>(std::move(prepared));
  }

  absl::Status run(const PreparedPlan& prepared, std::span<const StepLaunch> launches, std::span<std::byte>) override {
    const auto* plan = dynamic_cast<const ClPreparedPlan*>(&prepared);
    if (plan == nullptr) return absl::InvalidArgumentError("[opencl] plan prepared by another backend");
    last_failed_step_ = -1;
    for (const StepLaunch& launch : launches) {
      if (launch.step < 0 || static_cast<size_t>(launch.step) >= plan->steps.size())
        return absl::InvalidArgumentError(absl::StrCat("[opencl] step ", launch.step, " not in the plan"));
      if (absl::Status st = run_launch(plan->steps[static_cast<size_t>(launch.step)], launch); !st.ok()) {
        last_failed_step_ = launch.step;
        return st;
      }
    }
    stats_.launches += static_cast<int64_t>(launches.size());
    return absl::OkStatus();
  }

  absl::Status synchronize() override {
    const cl_int err = clFinish(queue_);
    return err == CL_SUCCESS ? absl::OkStatus() : absl::InternalError(cl_error("clFinish", err));
  }

 private:
  struct Buffer {
    cl_mem mem = nullptr;
    int64_t bytes = 0;
  };
  struct Compiled {
    cl_program program = nullptr;
    cl_kernel kernel = nullptr;
  };

  // The buffer and byte offset behind a device address.
  absl::StatusOr<std::pair<const Buffer*, int64_t>> resolve(const void* data) const {
    const uint64_t address = reinterpret_cast<uint64_t>(data);
    auto it = buffers_.find(address >> kAddressBits << kAddressBits);
    if (it == buffers_.end())
      return absl::InvalidArgumentError(absl::StrCat("[opencl] 0x", absl::Hex(address), " is not device memory of this backend"));
    return std::make_pair(&it->second, static_cast<int64_t>(address - it->first));
  }

  // Box copies as reads and writes of contiguous runs on the in-order queue, the last one
  // blocking (so all are done when it returns) and the others not: a blocking call per run took
  // PoCL ~28 us a run (a 64-channel edit box of 31 rows, 1984 runs: 55 ms -> ~2 ms). Waiting
  // with clFinish instead ran the suite on an H100's OpenCL slower than blocking on each run.
  absl::Status copy(const BufferRegion& region, const Box& box, void* host, bool in) {
    auto it = buffers_.find(region.buffer.id);
    if (it == buffers_.end()) return absl::InvalidArgumentError("[opencl] copy with an unknown buffer");
    cl_mem mem = it->second.mem;
    auto* bytes = static_cast<std::byte*>(host);
    struct Run {
      int64_t at, dense, n;
    };
    std::vector<Run> runs;
    absl::Status listed = gpu::for_each_box_run("opencl", region, box, it->second.bytes, [&](int64_t at, int64_t dense, int64_t n) {
      runs.push_back({at, dense, n});
      return absl::OkStatus();
    });
    if (!listed.ok()) return listed;
    for (size_t i = 0; i < runs.size(); ++i) {
      const cl_bool blocking = i + 1 == runs.size() ? CL_TRUE : CL_FALSE;
      const Run& r = runs[i];
      const cl_int err =
          in ? clEnqueueWriteBuffer(queue_, mem, blocking, static_cast<size_t>(r.at), static_cast<size_t>(r.n), bytes + r.dense, 0, nullptr, nullptr)
             : clEnqueueReadBuffer(queue_, mem, blocking, static_cast<size_t>(r.at), static_cast<size_t>(r.n), bytes + r.dense, 0, nullptr, nullptr);
      if (err != CL_SUCCESS) {
        clFinish(queue_);  // the runs enqueued so far still read or write `host`
        return absl::InternalError(cl_error(in ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", err));
      }
    }
    return absl::OkStatus();
  }

  // The kernel of a source: from memory, else the disk cache, else compiled (and stored).
  absl::StatusOr<cl_kernel> compiled(const gpu::GeneratedKernel& code) {
    const std::string key = absl::StrCat(code.source, "\n// ", device_name_, " ", driver_);
    const uint64_t hash = XXH3_64bits(key.data(), key.size());
    if (auto it = kernels_.find(hash); it != kernels_.end()) {
      stats_.kernels_reused += 1;
      return it->second.kernel;
    }
    const std::filesystem::path file = gpu::kernel_cache_dir("opencl") / absl::StrCat(absl::Hex(hash, absl::kZeroPad16), ".bin");
    cl_int err = CL_SUCCESS;
    cl_program program = nullptr;
    bool from_disk = false;
    if (std::ifstream f(file, std::ios::binary); f) {
      std::vector<unsigned char> binary((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const unsigned char* data = binary.data();
      const size_t size = binary.size();
      cl_int status = CL_SUCCESS;
      program = clCreateProgramWithBinary(context_, 1, &device_, &size, &data, &status, &err);
      if (err == CL_SUCCESS && status == CL_SUCCESS && clBuildProgram(program, 1, &device_, "", nullptr, nullptr) == CL_SUCCESS) {
        from_disk = true;
      } else if (program != nullptr) {
        clReleaseProgram(program);
        program = nullptr;
      }
    }
    if (program == nullptr) {
      const char* src = code.source.c_str();
      program = clCreateProgramWithSource(context_, 1, &src, nullptr, &err);
      if (err != CL_SUCCESS) return absl::InternalError(cl_error("clCreateProgramWithSource", err));
      err = clBuildProgram(program, 1, &device_, "-cl-std=CL1.2", nullptr, nullptr);
      if (err != CL_SUCCESS) {
        size_t size = 0;
        clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
        std::string log(size, '\0');
        clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
        clReleaseProgram(program);
        return absl::InternalError(absl::StrCat("[opencl] building ", code.name, " failed: ", log));
      }
      stats_.kernels_compiled += 1;
      store(program, file);
    } else {
      stats_.kernels_loaded += static_cast<int64_t>(from_disk);
    }
    cl_kernel kernel = clCreateKernel(program, code.name.c_str(), &err);
    if (err != CL_SUCCESS) {
      clReleaseProgram(program);
      return absl::InternalError(cl_error("clCreateKernel", err));
    }
    kernels_[hash] = Compiled{program, kernel};
    return kernel;
  }

  void store(cl_program program, const std::filesystem::path& file) const {
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) != CL_SUCCESS || size == 0) return;
    std::vector<unsigned char> binary(size);
    unsigned char* data = binary.data();
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(data), &data, nullptr) != CL_SUCCESS) return;
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    const std::filesystem::path tmp = file.string() + ".tmp" + std::to_string(getpid());
    if (std::ofstream f(tmp, std::ios::binary); f) {
      f.write(reinterpret_cast<const char*>(binary.data()), static_cast<std::streamsize>(size));
      if (!f) return;
    } else {
      return;
    }
    std::filesystem::rename(tmp, file, ec);  // atomic: readers see a whole file or none
  }

  absl::Status run_launch(const ClStep& step, const StepLaunch& launch) {
    cl_kernel k = step.kernel;
    cl_uint arg = 0;
    auto set = [&](size_t size, const void* value) { return clSetKernelArg(k, arg++, size, value); };
    auto set_long8 = [&](const std::array<int64_t, 8>& v) {
      cl_long8 x;
      for (int i = 0; i < 8; ++i) x.s[i] = v[static_cast<size_t>(i)];
      return set(sizeof(x), &x);
    };
    absl::StatusOr<std::pair<const Buffer*, int64_t>> out = resolve(launch.out.data);
    if (!out.ok()) return out.status();
    const int64_t esize = dtype_size(launch.out.dtype);
    const gpu::InputLayout ol = gpu::output_layout(launch.out, out->second / esize);
    cl_int err = set(sizeof(cl_mem), &out->first->mem);
    const cl_long out_base = ol.base;
    err |= set(sizeof(cl_long), &out_base);
    err |= set_long8(ol.strides);
    const cl_uint box_arg = arg;  // begin, extent, items: per box
    arg += 3;
    const cl_long depth = step.code.depth;
    err |= set(sizeof(cl_long), &depth);
    for (size_t i = 0; i < launch.inputs.size(); ++i) {
      const KernelInput& in = launch.inputs[i];
      // No data: an input the box does not read (concat's other slabs); any buffer binds.
      absl::StatusOr<std::pair<const Buffer*, int64_t>> r = in.data == nullptr ? std::make_pair(out->first, int64_t{0}) : resolve(in.data);
      if (!r.ok()) return r.status();
      const gpu::InputLayout l = gpu::input_layout(*step.node, static_cast<int>(i), in, r->second / gpu::address_unit(in.dtype),
                                                   step.code.rank);
      const cl_long base = l.base, red = l.red;
      err |= set(sizeof(cl_mem), &r->first->mem);
      err |= set(sizeof(cl_long), &base);
      err |= set_long8(l.strides);
      err |= set(sizeof(cl_long), &red);
      err |= set_long8(l.shape);
    }
    if (err != CL_SUCCESS) return absl::InternalError(cl_error("clSetKernelArg", err));
    for (const Box& box : launch.boxes) {
      const int64_t items = gpu::work_items(step.code, box);
      if (items == 0) continue;
      std::array<int64_t, 8> begin{}, extent{};
      extent.fill(1);
      for (int d = 0; d < box.rank(); ++d) begin[static_cast<size_t>(d)] = box.begin(d), extent[static_cast<size_t>(d)] = box.extent(d);
      arg = box_arg;
      err = set_long8(begin);
      err |= set_long8(extent);
      const cl_long n = items;
      err |= set(sizeof(cl_long), &n);
      const size_t global = static_cast<size_t>(items), local = static_cast<size_t>(step.code.local_size);
      err |= clEnqueueNDRangeKernel(queue_, k, 1, nullptr, &global, local > 0 ? &local : nullptr, 0, nullptr, nullptr);
      if (err != CL_SUCCESS) return absl::InternalError(cl_error("clEnqueueNDRangeKernel", err));
    }
    return absl::OkStatus();
  }

  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::string device_name_, driver_;
  absl::flat_hash_map<uint64_t, Buffer> buffers_;
  absl::flat_hash_map<uint64_t, Compiled> kernels_;
  uint64_t next_ = 1;
};

Backend* create(char* error, size_t error_size) {
  try {
    auto backend = std::make_unique<OpenClBackend>();
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

const TesseraBackendPlugin kPlugin = {TESSERA_BACKEND_ABI_VERSION, "opencl", &create};

}  // namespace
}  // namespace tessera

extern "C" __attribute__((visibility("default"))) const TesseraBackendPlugin* tessera_backend_plugin(void) {
  return &tessera::kPlugin;
}
