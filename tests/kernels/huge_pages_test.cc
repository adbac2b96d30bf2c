// HugePageChunks (kernels/huge_pages.h): 64-byte aligned blocks bump-allocated from shared
// chunks of at least 64 MiB, 2 MiB aligned; a block keeps its chunk alive.
#include "kernels/huge_pages.h"

#include <doctest/doctest.h>

#include <algorithm>
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

TEST_CASE("huge pages: single buffers from 1.5 MiB on are 2 MiB aligned, rounded up by at most a third") {
  constexpr int64_t kMiB = int64_t{1} << 20, kPage = 2 * kMiB;
  // Below the threshold: the request as is.
  CHECK(huge_buffer_span(0) == 1);
  CHECK(huge_buffer_span(kHugeBufferMin - 1) == kHugeBufferMin - 1);
  // The last partial huge page is rounded up when that adds at most a third of the request.
  CHECK(huge_buffer_span(kHugeBufferMin) == kPage);                  // 1.5 MiB: + 0.5
  CHECK(huge_buffer_span(1647 * 1024) == kPage);                     // a 4096-token K cache row set
  CHECK(huge_buffer_span(kPage) == kPage);
  CHECK(huge_buffer_span(kPage + kMiB / 8) == kPage + kMiB / 8);     // + 1.875 would be 85%: kept
  CHECK(huge_buffer_span(3 * kMiB + kMiB / 4) == 2 * kPage);         // + 0.75 MiB of 3.25
  CHECK(huge_buffer_span(5 * kMiB) == 6 * kMiB);                     // + 1 MiB of 5
  CHECK(huge_buffer_span(4 * kMiB + kMiB / 4) == 4 * kMiB + kMiB / 4);  // + 1.75 of 4.25: kept
  for (int64_t bytes : {int64_t{1}, int64_t{1000}, kMiB, kHugeBufferMin, 1647 * int64_t{1024}, kPage + 64, 5 * kMiB}) {
    CAPTURE(bytes);
    CHECK(huge_buffer_span(bytes) >= bytes);
    CHECK(huge_buffer_span(bytes) - bytes <= std::max<int64_t>(1, bytes / 3));
    std::byte* p = huge_buffer_new(bytes);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % (bytes >= kHugeBufferMin ? kPage : 64) == 0);
    std::memset(p, 0x5a, static_cast<size_t>(bytes));
    CHECK(p[bytes - 1] == std::byte{0x5a});
    huge_buffer_delete(p, bytes);
  }
  huge_buffer_delete(nullptr, kPage);
}
