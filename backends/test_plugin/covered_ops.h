// The op subset the test plugins ("test", "devsim") run: enough for mixed plans (the rest falls
// back or is an Error) without a GPU.
#pragma once

#include "engine/ops.h"

namespace tessera::test_plugins {

inline bool covered(OpKind kind) {
  switch (kind) {
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Matmul:
    case OpKind::Softmax:
    case OpKind::Reduce:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::FusedElementwise:
      return true;
    default:
      return false;
  }
}

}  // namespace tessera::test_plugins
