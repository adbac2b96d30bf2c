// PLACEHOLDER: to be replaced by the real reference kernels.
#include "kernels/view.h"

namespace tessera::ref {

absl::Status rms_norm(const KernelArgs&) { return absl::UnimplementedError("rms_norm"); }
absl::Status layer_norm(const KernelArgs&) { return absl::UnimplementedError("layer_norm"); }
absl::Status group_norm(const KernelArgs&) { return absl::UnimplementedError("group_norm"); }

}  // namespace tessera::ref
