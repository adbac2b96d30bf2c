// PLACEHOLDER: to be replaced by the real reference kernels.
#include "kernels/view.h"

namespace tessera::ref {

absl::Status reduce(const KernelArgs&) { return absl::UnimplementedError("reduce"); }
absl::Status cumsum(const KernelArgs&) { return absl::UnimplementedError("cumsum"); }
absl::Status softmax(const KernelArgs&) { return absl::UnimplementedError("softmax"); }

}  // namespace tessera::ref
