// Shared by engine/session.cc and engine/session_read.cc only; not part of the API.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>

#include "engine/session.h"

namespace tessera {

struct GraphSession::Value {
  std::byte* buffer = nullptr;  // from the pool: kept values and inputs (returned by drop())
  MemoryPool::Use use = MemoryPool::Use::Kept;
  TensorView view;    // over buffer, the arena (transients during a read) or constant data
  int64_t bytes = 0;  // size of buffer
};

using PoolLock = std::lock_guard<std::recursive_mutex>;

}  // namespace tessera
