// The reference kernel table, generated from the op list (TESSERA_OPS in engine/ops.h): kind K
// with name n runs ref::n, defined in one of kernels/ref/*.cc.
#include <iterator>

#include "engine/ops.h"
#include "kernels/ref/ref_kernels.h"

namespace tessera::ref {

#define TESSERA_REF_KERNEL_DECL(kind, name) absl::Status name(const KernelArgs&);
TESSERA_OPS(TESSERA_REF_KERNEL_DECL)
#undef TESSERA_REF_KERNEL_DECL

KernelFn reference_kernel(OpKind kind) {
  static constexpr KernelFn kKernels[] = {
#define TESSERA_REF_KERNEL_ENTRY(kind, name) &name,
      TESSERA_OPS(TESSERA_REF_KERNEL_ENTRY)
#undef TESSERA_REF_KERNEL_ENTRY
  };
  static_assert(std::size(kKernels) == static_cast<size_t>(OpKind::Count));
  const auto index = static_cast<size_t>(kind);
  return index < std::size(kKernels) ? kKernels[index] : nullptr;
}

}  // namespace tessera::ref
