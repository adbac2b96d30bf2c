// PLACEHOLDER: to be replaced by the real reference kernels.
#include "kernels/view.h"

namespace tessera::ref {

absl::Status rope(const KernelArgs&) { return absl::UnimplementedError("rope"); }
absl::Status conv2d(const KernelArgs&) { return absl::UnimplementedError("conv2d"); }
absl::Status pool2d(const KernelArgs&) { return absl::UnimplementedError("pool2d"); }
absl::Status upsample(const KernelArgs&) { return absl::UnimplementedError("upsample"); }
absl::Status attention(const KernelArgs&) { return absl::UnimplementedError("attention"); }

}  // namespace tessera::ref
