#include "backends/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ref/ref_kernels.h"

namespace tessera {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool optimised) : optimised_(optimised) {}
  std::string_view name() const override { return optimised_ ? "cpu" : "reference"; }
  absl::Status run(const KernelArgs& args) override {
    if (optimised_)
      if (KernelFn fast = cpu::optimised_kernel(args.graph, args.node)) return fast(args);
    KernelFn fn = ref::reference_kernel(args.node.kind);
    if (fn == nullptr) return absl::InternalError("no kernel for this op");
    return fn(args);
  }

 private:
  bool optimised_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(true); }
std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<CpuBackend>(false); }

}  // namespace tessera
