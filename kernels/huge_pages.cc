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
