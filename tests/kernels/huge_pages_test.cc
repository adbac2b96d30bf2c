// HugePageChunks (kernels/huge_pages.h): 64-byte aligned blocks bump-allocated from shared
// chunks of at least 64 MiB, 2 MiB aligned; a block keeps its chunk alive. HugePageSlabs: blocks
// of 16 KiB units placed first fit in shared 2 MiB pages, a page freed with its last block.
// huge_buffer_new: single buffers of 1.5 MiB and more in huge pages of their own.
#include "kernels/huge_pages.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

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

TEST_CASE("huge pages: slab blocks share 2 MiB pages first fit, and a page goes with its last block") {
  constexpr int64_t kKiB = 1024, kPage = int64_t{2} << 20;
  const auto at = [](const std::byte* p) { return reinterpret_cast<uintptr_t>(p); };
  const auto page_of = [&](const std::byte* p) { return at(p) / kPage; };
  HugePageSlabs slabs;
  CHECK(slabs.pages() == 0);
  // Three 557 KiB blocks (35 units each: a Gemma-3 layer's K cache at ~1100 tokens) fill a page
  // to 105 of its 128 units; the fourth opens a second page.
  constexpr int64_t kBlock = 557 * kKiB;
  std::vector<std::byte*> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(slabs.take(kBlock));
    REQUIRE(blocks.back() != nullptr);
    CHECK(at(blocks.back()) % kSlabUnit == 0);
  }
  CHECK(slabs.pages() == 2);
  CHECK(at(blocks[0]) % kPage == 0);
  CHECK(at(blocks[1]) == at(blocks[0]) + 35 * kSlabUnit);
  CHECK(at(blocks[2]) == at(blocks[0]) + 70 * kSlabUnit);
  CHECK(page_of(blocks[3]) != page_of(blocks[0]));
  CHECK(at(blocks[3]) % kPage == 0);
  // Each block holds its own bytes: fill each with its index, then check all of them.
  for (size_t i = 0; i < blocks.size(); ++i) std::memset(blocks[i], static_cast<int>(i + 1), static_cast<size_t>(kBlock));
  for (size_t i = 0; i < blocks.size(); ++i) {
    CHECK(blocks[i][0] == std::byte(i + 1));
    CHECK(blocks[i][kBlock - 1] == std::byte(i + 1));
  }
  // The 23 units left in the first page take a block of up to 368 KiB; one more unit does not fit.
  std::byte* tail = slabs.take(23 * kSlabUnit);
  CHECK(at(tail) == at(blocks[0]) + 105 * kSlabUnit);
  std::byte* over = slabs.take(2 * kSlabUnit);  // first fit: the second page, after blocks[3]
  CHECK(at(over) == at(blocks[3]) + 35 * kSlabUnit);
  CHECK(slabs.pages() == 2);
  // A block given back leaves a hole the next block that fits takes (first fit).
  slabs.give(blocks[1], kBlock);
  std::byte* again = slabs.take(100 * kKiB);  // 7 units
  CHECK(at(again) == at(blocks[1]));
  // The second page goes once its last block is given back; the first stays while it holds any.
  slabs.give(blocks[3], kBlock);
  CHECK(slabs.pages() == 2);
  slabs.give(over, 2 * kSlabUnit);
  CHECK(slabs.pages() == 1);
  for (std::byte* p : {blocks[0], blocks[2]}) slabs.give(p, kBlock);
  slabs.give(tail, 23 * kSlabUnit);
  CHECK(slabs.pages() == 1);
  slabs.give(again, 100 * kKiB);
  CHECK(slabs.pages() == 0);
  // Sizes: a block of a whole page fits, a larger one is refused; a null block is ignored.
  std::byte* whole = slabs.take(kPage);
  CHECK(whole != nullptr);
  CHECK(slabs.take(kPage + 1) == nullptr);
  slabs.give(nullptr, kBlock);
  slabs.give(whole, kPage);
  CHECK(slabs.pages() == 0);
}

