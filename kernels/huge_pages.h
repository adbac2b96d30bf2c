// Memory for data read often and whole (packed weights, hot weight copies): 64-byte aligned
// blocks bump-allocated from chunks of transparent-huge-page memory. A chunk is at least 64 MiB
// (small blocks do not each round up to a 2 MiB page), 2 MiB aligned and advised into huge pages
// before its first touch (DESIGN.md section 5); it is freed when no block of it is held any more
// and it is no longer the one being filled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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

// Single buffers of data read whole and often, at least kHugeBufferMin bytes (a long context's
// K/V cache of one layer, read whole by every decoded token): 2 MiB aligned and advised into
// transparent huge pages before their first touch, the last partial 2 MiB rounded up to a
// whole huge page when that adds at most a third of the request (else that part keeps small
// pages). With small pages a 4096-token decode of SmolLM2-135M walks ~24K pages of K/V per
// token, far past the TLB. Smaller buffers are plain 64-byte aligned allocations.
inline constexpr int64_t kHugeBufferMin = int64_t{3} << 19;  // 1.5 MiB
// The bytes huge_buffer_new allocates for a request of `bytes` (>= bytes).
int64_t huge_buffer_span(int64_t bytes);
// nullptr when out of memory; free with huge_buffer_delete and the same `bytes`.
std::byte* huge_buffer_new(int64_t bytes);
void huge_buffer_delete(std::byte* data, int64_t bytes);

// Buffers from kSlabMin up to kHugeBufferMin bytes (a layer's K/V cache at a context of a few
// hundred to a few thousand tokens, read whole by every decoded token) share 2 MiB huge pages:
// each takes the first run of free kSlabUnit units that holds it, and a page goes back to the
// system when its last block is given back. In small pages the K/V caches of a decode step at
// context 1024 span ~6000 (SmolLM2-135M) and ~4000 (Gemma-3-270M) pages, past the TLB, and the
// weights streamed between two layers evict the page tables too: attention took 20-60% longer
// than on huge pages. Not thread-safe (the memory pool's lock).
inline constexpr int64_t kSlabMin = int64_t{64} << 10;   // 16 small pages
inline constexpr int64_t kSlabUnit = int64_t{16} << 10;  // a block wastes less than this
class HugePageSlabs {
 public:
  HugePageSlabs() = default;
  ~HugePageSlabs();  // frees every page, blocks still held included
  HugePageSlabs(const HugePageSlabs&) = delete;
  HugePageSlabs& operator=(const HugePageSlabs&) = delete;

  // A kSlabUnit-aligned block of 1 to 2 MiB bytes; nullptr when out of memory (or larger).
  std::byte* take(int64_t bytes);
  // Gives back a block take() returned for the same `bytes`.
  void give(std::byte* data, int64_t bytes);
  // Huge pages held now.
  int64_t pages() const { return static_cast<int64_t>(pages_.size()); }

 private:
  struct Page {
    std::byte* data = nullptr;
    uint64_t used[2] = {0, 0};  // bit u of the page's 128 units: unit u is taken
  };
  std::vector<Page> pages_;
};

}  // namespace tessera
