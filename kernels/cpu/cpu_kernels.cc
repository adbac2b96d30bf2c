#include "kernels/cpu/cpu_kernels.h"

namespace tessera::cpu {

// Defined in kernels/cpu/matmul.cc.
absl::Status matmul_f32(const KernelArgs& args);

KernelFn optimised_kernel(const Node& node) {
  switch (node.kind) {
    // Matmul inputs share the output dtype (engine/ops_index.cc), so f32 out means f32 in.
    case OpKind::Matmul:
      return node.dtype == DType::F32 ? matmul_f32 : nullptr;
    default:
      return nullptr;
  }
}

}  // namespace tessera::cpu
