// Optimised CPU kernels. Each is checked against its reference kernel (tests/kernels).
#pragma once

#include "kernels/view.h"

namespace tessera::cpu {

// The optimised kernel for this node, or nullptr when the reference kernel is used.
KernelFn optimised_kernel(const Node& node);

}  // namespace tessera::cpu
