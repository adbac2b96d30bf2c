// Memory for data read often and whole (packed weights, hot weight copies): 64-byte aligned
// blocks bump-allocated from chunks of transparent-huge-page memory. A chunk is at least 64 MiB
// (small blocks do not each round up to a 2 MiB page), 2 MiB aligned and advised into huge pages
// before its first touch (DESIGN.md section 5); it is freed when no block of it is held any more
// and it is no longer the one being filled.
#pragma once

#include <cstdint>
#include <memory>

namespace tessera {

class HugePageChunks {
 public:
  struct Block {
    std::shared_ptr<void> data;   // nullptr when out of memory; keeps its chunk alive
    int64_t new_chunk_bytes = 0;  // bytes of the chunk allocated for this block, 0 if none
  };
  // A block of `bytes` (>= 0). Not thread-safe: callers sharing one HugePageChunks lock.
  Block take(int64_t bytes);

 private:
  struct Chunk;
  std::shared_ptr<Chunk> current_;
};

}  // namespace tessera
