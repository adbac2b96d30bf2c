// Backend: where kernels run. The CPU backend is always built; GPU backends are plugins.
#pragma once

#include <memory>
#include <string_view>

#include "kernels/view.h"

namespace tessera {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The kernel this backend runs for `node` (nullptr: none). Chosen once per plan, never per
  // box; depends only on the node and its inputs.
  virtual KernelFn kernel_for(const Graph& graph, const Node& node) const = 0;
  // Computes args.box of args.node into args.out. Never throws; errors come back as status.
  absl::Status run(const KernelArgs& args) const {
    KernelFn fn = kernel_for(args.graph, args.node);
    if (fn == nullptr) return absl::UnimplementedError("no kernel for this op on this backend");
    return fn(args);
  }
};

// The CPU backend: optimised kernels where registered, the reference kernels otherwise.
std::unique_ptr<Backend> make_cpu_backend();
// The reference backend: scalar reference kernels only (the oracle).
std::unique_ptr<Backend> make_reference_backend();

}  // namespace tessera
