// PLACEHOLDER: to be replaced by the real reference kernels.
#include "kernels/view.h"

namespace tessera::ref {

absl::Status reshape(const KernelArgs&) { return absl::UnimplementedError("reshape"); }
absl::Status permute(const KernelArgs&) { return absl::UnimplementedError("permute"); }
absl::Status slice(const KernelArgs&) { return absl::UnimplementedError("slice"); }
absl::Status pad(const KernelArgs&) { return absl::UnimplementedError("pad"); }
absl::Status concat(const KernelArgs&) { return absl::UnimplementedError("concat"); }
absl::Status repeat(const KernelArgs&) { return absl::UnimplementedError("repeat"); }
absl::Status flip(const KernelArgs&) { return absl::UnimplementedError("flip"); }
absl::Status expand(const KernelArgs&) { return absl::UnimplementedError("expand"); }

}  // namespace tessera::ref
