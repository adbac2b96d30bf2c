// The "test" backend plugin: the reference kernels over host memory, for a subset of ops only
// (elementwise unary/binary/fused, matmul, softmax, reductions, reshape/permute), so that the
// registry, the plugin ABI and Backend::supports are exercised without a GPU.
#include <cstdio>
#include <exception>

#include "backends/cpu/host_backend.h"
#include "backends/test_plugin/covered_ops.h"
#include "kernels/ref/ref_kernels.h"

namespace tessera {
namespace {

using test_plugins::covered;

class TestBackend final : public HostBackend {
 public:
  std::string_view name() const override { return "test"; }

 protected:
  KernelFn kernel_for(const Graph& graph, const Node& node) const override {
    if (!covered(node.kind) || node.dtype != DType::F32) return nullptr;
    for (NodeId in : node.inputs)
      if (graph.node(in).dtype != DType::F32) return nullptr;
    return ref::reference_kernel(node.kind);
  }
};

Backend* create(char* error, size_t error_size) {
  try {
    return new TestBackend();
  } catch (const std::exception& e) {  // never throw across the plugin boundary
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}

const TesseraBackendPlugin kPlugin = {TESSERA_BACKEND_ABI_VERSION, "test", &create};

}  // namespace
}  // namespace tessera

extern "C" __attribute__((visibility("default"))) const TesseraBackendPlugin*
tessera_backend_plugin(void) {
  return &tessera::kPlugin;
}
