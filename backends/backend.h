// Backend: where a session's kernels run, behind one small interface that a GPU fits.
//
// Contract (every implementation, built in or plugin):
// - Errors come back as absl::Status (or StatusOr); nothing throws across this interface and
//   nothing aborts on bad input. A failed call leaves the backend usable.
// - Threading: one instance is used by one thread at a time (a session is single-threaded);
//   distinct instances are independent. A backend may run work on its own threads or queues;
//   run() may return before the work is done, synchronize() waits for it.
// - Memory: buffers are handles, not host pointers (device memory need not be addressable by
//   the host). A handle's id is the buffer's base address in the backend's own address space
//   (a host address for host backends, a device address for CUDA; a plugin whose API has no
//   addresses, such as OpenCL or Vulkan, gives each buffer a range of a virtual space). The
//   views given to run() carry such addresses: base + byte offset. Host-memory backends
//   (host_addressable() true) also accept any host pointer. Copies and runs on one backend
//   take effect in call order.
// - Ownership: the caller owns what allocate() returns until it calls free(); the PreparedPlan
//   from prepare() is owned by the caller (a session stores it with its Plan) and must be
//   destroyed before the backend. Views and buffers passed to run() must stay alive until
//   synchronize() returns.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/graph.h"
#include "kernels/view.h"
#include "planner/plan.h"

namespace tessera {

// A device buffer: an opaque id from Backend::allocate. 0 is never a valid buffer.
struct BufferHandle {
  uint64_t id = 0;
  explicit operator bool() const { return id != 0; }
};

// A dense row-major box `extent` of a tensor of `dtype`, stored in `buffer` from byte
// `offset_bytes` on (the buffer side of copy_in/copy_out).
struct BufferRegion {
  BufferHandle buffer;
  int64_t offset_bytes = 0;
  DType dtype = DType::F32;
  Box extent;
};

// One step of a prepared plan to run: which step, its inputs, its output and the boxes of the
// output to compute (each inside out.extent). View addresses are in the backend's memory. No
// boxes: nothing to compute (a host reshape whose output already holds its elements), and a
// backend runs nothing for it.
struct StepLaunch {
  int32_t step = 0;  // index into the plan's steps
  std::span<const KernelInput> inputs;
  TensorView out;
  std::span<const Box> boxes;
};

// What a backend did so far (cumulative): kernels compiled, loaded from a disk cache or reused
// from memory by prepare(), and launches run. Host backends compile nothing.
struct BackendStats {
  int64_t kernels_compiled = 0;
  int64_t kernels_loaded = 0;
  int64_t kernels_reused = 0;
  int64_t launches = 0;
  int64_t grouped_launches = 0;  // launches run inside an earlier one's group call (cpu: linears sharing x)
  int64_t phased_launches = 0;  // launches a team ran in two phases (cpu: a decode step's attention)
  int64_t prepared_bytes = 0;  // data prepared once for kernels (cpu: weights packed for int8 linear)
};

class Backend {
 public:
  virtual ~Backend() = default;

  // A short lower-case name ("cpu", "reference", a plugin's name); plan caches are keyed by it.
  virtual std::string_view name() const = 0;
  // Whether this backend can run `node` of `graph` (op kind, dtypes, attributes): OK, or
  // Unimplemented with a message saying what is missing. Cheap; called at plan time.
  virtual absl::Status supports(const Graph& graph, const Node& node) const = 0;
  // A buffer of at least `size_bytes` bytes (64-byte aligned); ResourceExhausted when out of
  // memory. free() of a null or unknown handle does nothing.
  virtual absl::StatusOr<BufferHandle> allocate(int64_t size_bytes) = 0;
  virtual void free(BufferHandle buffer) = 0;
  // Copies `box` (inside region.extent) between dense row-major host memory holding exactly
  // that box and the buffer region. InvalidArgument for a box outside the extent, an unknown
  // buffer or a region past the buffer's end. copy_in has read `host` when it returns (the
  // device may receive the data later, before any later run); copy_out returns once `host`
  // holds the data (it waits for earlier runs).
  virtual absl::Status copy_in(const BufferRegion& region, const Box& box, const void* host) = 0;
  virtual absl::Status copy_out(const BufferRegion& region, const Box& box, void* host) = 0;
  // Chooses (or compiles) the kernel of every step of `plan` over `graph`, once per plan. The
  // result is read by run() only; Unimplemented (naming the op) when a step is not supported.
  virtual absl::StatusOr<std::unique_ptr<PreparedPlan>> prepare(const Graph& graph, const Plan& plan) = 0;
  // Runs `launches` in order (each after the previous one's writes are visible). `scratch`:
  // host memory of at least prepared.scratch_bytes (64-byte aligned) for the kernels' scratch.
  // On error the outputs of all launches of the call are undefined; the status names the
  // failing op.
  virtual absl::Status run(const PreparedPlan& prepared, std::span<const StepLaunch> launches,
                           std::span<std::byte> scratch) = 0;
  // True when the backend keeps its own copy of `consumer`'s constant weight (input 1) in the
  // layout its kernel reads (the cpu backend's int8 linear: packed panels in huge pages), so the
  // session need not copy that weight into huge-page memory for it. Cheap; called at plan time.
  virtual bool repacks_weight(const Graph& /*graph*/, const Node& /*consumer*/) const { return false; }
  // Waits until every earlier copy and run is complete; returns the first asynchronous error.
  virtual absl::Status synchronize() = 0;
  // A hint that a run() is coming soon (the caller is planning it): a backend whose workers
  // sleep between runs may start waking them. Does nothing by default.
  virtual void expect_run() {}

  // True when the backend computes in host memory: views passed to run() hold host pointers.
  bool host_addressable() const { return host_addressable_; }
  // After run() failed: the `step` of the launch that failed (launches before it in the span
  // completed; none after it did). -1 after a successful run.
  int32_t last_failed_step() const { return last_failed_step_; }
  const BackendStats& stats() const { return stats_; }
  // The device, in words ("opencl: <device> (<driver>)", "cpu (avx2)": the CPU kernels'
  // instruction set); the name for other host backends.
  std::string description() const { return description_.empty() ? std::string(name()) : description_; }

 protected:
  explicit Backend(bool host_addressable) : host_addressable_(host_addressable) {}
  int32_t last_failed_step_ = -1;
  BackendStats stats_;
  std::string description_;

 private:
  bool host_addressable_;
};

// The CPU backend: optimised kernels where registered, the reference kernels otherwise.
std::unique_ptr<Backend> make_cpu_backend();
// The reference backend: scalar reference kernels only (the oracle).
std::unique_ptr<Backend> make_reference_backend();

}  // namespace tessera

// ---------------------------------------------------------------------------------------------
// Plugin ABI. A backend plugin is a shared library named libtessera_backend_<name>.so, found by
// BackendRegistry (backends/registry.h) in the directories of TESSERA_BACKEND_PATH
// (colon-separated) and then in <install prefix>/lib/tessera. It exports exactly one C symbol,
//
//   extern "C" const TesseraBackendPlugin* tessera_backend_plugin(void);
//
// returning a pointer to a static descriptor (never freed). The registry reads `abi_version`
// first and touches nothing else unless it equals TESSERA_BACKEND_ABI_VERSION, the version of
// the C++ interface above (Backend, KernelArgs, Plan, PreparedPlan layouts); any change to those
// bumps it. A plugin is built with the same compiler and these headers. `create` returns a new
// backend owned by the caller (deleted through its virtual destructor), or nullptr with a
// NUL-terminated message in `error` (at most error_size bytes); it never throws (a missing GPU
// runtime is such an error). Libraries stay loaded until the process exits: the objects they
// made may outlive any registry.
#define TESSERA_BACKEND_ABI_VERSION 3u
#define TESSERA_BACKEND_PLUGIN_SYMBOL "tessera_backend_plugin"

extern "C" {
struct TesseraBackendPlugin {
  uint32_t abi_version;  // first member in every version
  const char* name;      // the backend's name, as in the file name
  tessera::Backend* (*create)(char* error, size_t error_size);
};
typedef const TesseraBackendPlugin* (*TesseraBackendPluginFn)(void);
}
