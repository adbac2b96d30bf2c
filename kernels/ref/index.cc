// PLACEHOLDER: to be replaced by the real reference kernels.
#include "kernels/view.h"

namespace tessera::ref {

absl::Status matmul(const KernelArgs&) { return absl::UnimplementedError("matmul"); }
absl::Status gather(const KernelArgs&) { return absl::UnimplementedError("gather"); }
absl::Status triangle(const KernelArgs&) { return absl::UnimplementedError("triangle"); }
absl::Status arange(const KernelArgs&) { return absl::UnimplementedError("arange"); }
absl::Status rand(const KernelArgs&) { return absl::UnimplementedError("rand"); }

}  // namespace tessera::ref
