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

// A device session's per-node device state (engine/session_device.cc). For a node whose value
// lives in device memory: where (`home`: its own buffer when kept, the device arena when
// transient) and a host copy for host steps and reads. For a node whose value lives on the
// host (inputs, constants, fallback steps' outputs): a device copy for device steps. A copy is
// full-shape, filled box by box as steps need it; `valid` is always inside the node's valid
// region (writes and evictions shrink both).
struct GraphSession::Mirror {
  BufferRegion home;
  BufferHandle own;             // home buffer of a kept device value
  BufferHandle device;          // device copy of a host value
  bool shared = false;          // `device` is the pool's copy of a constant (not freed here)
  std::byte* host = nullptr;    // host copy of a device value (from the pool)
  int64_t host_bytes = 0;
  TensorView view;              // the copy, as steps on its side see it
  Region valid;
};

using PoolLock = std::lock_guard<std::recursive_mutex>;

}  // namespace tessera
