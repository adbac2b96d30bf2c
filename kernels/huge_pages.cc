#include "kernels/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace tessera {

namespace {
constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr std::align_val_t kSmallAlign{64};
}  // namespace

int64_t huge_buffer_span(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 1);
  if (bytes < kHugeBufferMin) return bytes;
  const int64_t whole = bytes / kHugePage * kHugePage, rest = bytes - whole;
  return rest > 0 && kHugePage - rest <= bytes / 3 ? whole + kHugePage : bytes;
}

std::byte* huge_buffer_new(int64_t bytes) {
  const int64_t span = huge_buffer_span(bytes);
  if (span < kHugeBufferMin)
    return static_cast<std::byte*>(::operator new[](static_cast<size_t>(span), kSmallAlign, std::nothrow));
  auto* data = static_cast<std::byte*>(::operator new[](static_cast<size_t>(span), std::align_val_t(kHugePage), std::nothrow));
  if (data != nullptr) madvise(data, static_cast<size_t>(span), MADV_HUGEPAGE);
  return data;
}

void huge_buffer_delete(std::byte* data, int64_t bytes) {
  if (data == nullptr) return;
  if (huge_buffer_span(bytes) < kHugeBufferMin) ::operator delete[](data, kSmallAlign);
  else ::operator delete[](data, std::align_val_t(kHugePage));
}

namespace {
constexpr int64_t kUnitsPerPage = kHugePage / kSlabUnit;
static_assert(kUnitsPerPage == 128, "HugePageSlabs::Page holds two 64-bit words of units");
int64_t units_of(int64_t bytes) { return (bytes + kSlabUnit - 1) / kSlabUnit; }

bool unit_taken(const uint64_t* used, int64_t u) { return (used[u / 64] >> (u % 64)) & 1; }
void mark_units(uint64_t* used, int64_t first, int64_t count, bool taken) {
  for (int64_t u = first; u < first + count; ++u) {
    const uint64_t bit = uint64_t{1} << (u % 64);
    used[u / 64] = taken ? used[u / 64] | bit : used[u / 64] & ~bit;
  }
}
// The first unit of the first run of `count` free units, or -1.
int64_t find_units(const uint64_t* used, int64_t count) {
  int64_t run = 0;
  for (int64_t u = 0; u < kUnitsPerPage; ++u) {
    run = unit_taken(used, u) ? 0 : run + 1;
    if (run == count) return u + 1 - count;
  }
  return -1;
}
}  // namespace

HugePageSlabs::~HugePageSlabs() {
  for (Page& page : pages_) std::free(page.data);
}

std::byte* HugePageSlabs::take(int64_t bytes) {
  const int64_t count = units_of(std::max<int64_t>(bytes, 1));
  if (count > kUnitsPerPage) return nullptr;
  for (Page& page : pages_)
    if (const int64_t first = find_units(page.used, count); first >= 0) {
      mark_units(page.used, first, count, true);
      return page.data + first * kSlabUnit;
    }
  Page page;
  page.data = static_cast<std::byte*>(std::aligned_alloc(static_cast<size_t>(kHugePage), static_cast<size_t>(kHugePage)));
  if (page.data == nullptr) return nullptr;
  madvise(page.data, static_cast<size_t>(kHugePage), MADV_HUGEPAGE);
  mark_units(page.used, 0, count, true);
  pages_.push_back(page);
  return page.data;
}

void HugePageSlabs::give(std::byte* data, int64_t bytes) {
  if (data == nullptr) return;
  for (size_t i = 0; i < pages_.size(); ++i) {
    Page& page = pages_[i];
    if (data < page.data || data >= page.data + kHugePage) continue;
    mark_units(page.used, (data - page.data) / kSlabUnit, units_of(std::max<int64_t>(bytes, 1)), false);
    if (page.used[0] == 0 && page.used[1] == 0) {
      std::free(page.data);
      pages_.erase(pages_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return;
  }
}

struct HugePageChunks::Chunk {
  std::byte* data = nullptr;
  int64_t size = 0, used = 0;
  ~Chunk() { std::free(data); }
};

HugePageChunks::Block HugePageChunks::take(int64_t bytes) {
  constexpr int64_t kMinChunk = int64_t{64} << 20;
  const int64_t need = (std::max<int64_t>(bytes, 1) + 63) / 64 * 64;
  Block block;
  if (current_ == nullptr || current_->size - current_->used < need) {
    auto chunk = std::make_shared<Chunk>();
    chunk->size = std::max(kMinChunk, (need + kHugePage - 1) / kHugePage * kHugePage);
    chunk->data = static_cast<std::byte*>(std::aligned_alloc(static_cast<size_t>(kHugePage), static_cast<size_t>(chunk->size)));
    if (chunk->data == nullptr) return block;
    madvise(chunk->data, static_cast<size_t>(chunk->size), MADV_HUGEPAGE);
    current_ = std::move(chunk);
    block.new_chunk_bytes = current_->size;
  }
  void* at = current_->data + current_->used;
  current_->used += need;
  block.data = std::shared_ptr<void>(current_, at);
  return block;
}

}  // namespace tessera
