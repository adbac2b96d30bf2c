// The built-in host backends: "cpu" (optimised kernels where registered, reference otherwise)
// and "reference" (the scalar oracle only).
#include "backends/cpu/host_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ref/ref_kernels.h"

namespace tessera {

namespace {

class CpuBackend final : public HostBackend {
 public:
  explicit CpuBackend(bool optimised) : optimised_(optimised) {}
  std::string_view name() const override { return optimised_ ? "cpu" : "reference"; }

 protected:
  KernelFn kernel_for(const Graph& graph, const Node& node) const override {
    if (optimised_)
      if (KernelFn fast = cpu::optimised_kernel(graph, node)) return fast;
    return ref::reference_kernel(node.kind);
  }

 private:
  bool optimised_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>(true);
}
std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<CpuBackend>(false);
}

}  // namespace tessera
