// The scalar reference kernel of every op: the oracle optimised kernels are checked against.
#pragma once

#include "kernels/view.h"

namespace tessera::ref {

KernelFn reference_kernel(OpKind kind);

}  // namespace tessera::ref
