// HugePageChunks (kernels/huge_pages.h): 64-byte aligned blocks bump-allocated from shared
// chunks of at least 64 MiB, 2 MiB aligned; a block keeps its chunk alive.
#include "kernels/huge_pages.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>

using namespace tessera;

TEST_CASE("huge pages: blocks are aligned, disjoint and share a chunk until it is full") {
  HugePageChunks chunks;
  const HugePageChunks::Block a = chunks.take(100), b = chunks.take(1);
  REQUIRE(a.data != nullptr);
  REQUIRE(b.data != nullptr);
  CHECK(a.new_chunk_bytes == int64_t{64} << 20);  // the first block opens a chunk
  CHECK(b.new_chunk_bytes == 0);                  // the second fits in it
  const auto at = [](const HugePageChunks::Block& block) { return reinterpret_cast<uintptr_t>(block.data.get()); };
  CHECK(at(a) % 64 == 0);
  CHECK(at(b) == at(a) + 128);  // 100 bytes round up to 128
  CHECK(at(a) % (uintptr_t{2} << 20) == 0);  // the chunk's start
  std::memset(a.data.get(), 1, 100);  // writable
  // A block larger than a chunk gets its own, rounded up to 2 MiB; the next small one goes there.
  const HugePageChunks::Block big = chunks.take((int64_t{64} << 20) + 1);
  REQUIRE(big.data != nullptr);
  CHECK(big.new_chunk_bytes == (int64_t{66} << 20));
  CHECK(at(big) % (uintptr_t{2} << 20) == 0);
  const HugePageChunks::Block c = chunks.take(64);
  CHECK(c.new_chunk_bytes == 0);
  CHECK(at(c) == at(big) + (int64_t{64} << 20) + 64);
}

TEST_CASE("huge pages: a block keeps its chunk alive after the allocator is gone") {
  HugePageChunks::Block kept;
  {
    HugePageChunks chunks;
    kept = chunks.take(256);
    const HugePageChunks::Block other = chunks.take(256);
    CHECK(kept.data.use_count() == 3);  // the allocator's current chunk, and both blocks
  }
  CHECK(kept.data.use_count() == 1);
  std::memset(kept.data.get(), 7, 256);
  CHECK(static_cast<unsigned char*>(kept.data.get())[255] == 7);
}
