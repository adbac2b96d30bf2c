#include "backends/gpu/device_copies.h"

#include <array>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace tessera::gpu {

std::filesystem::path kernel_cache_dir(std::string_view backend) {
  const std::string name(backend);
  if (const char* dir = std::getenv("TESSERA_CACHE_DIR"); dir != nullptr && *dir) return std::filesystem::path(dir) / name;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg) return std::filesystem::path(xdg) / "tessera" / name;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home)
    return std::filesystem::path(home) / ".cache" / "tessera" / name;
  return std::filesystem::temp_directory_path() / "tessera" / name;
}

absl::Status for_each_box_run(std::string_view backend, const BufferRegion& region, const Box& box, int64_t buffer_bytes,
                              absl::FunctionRef<absl::Status(int64_t, int64_t, int64_t)> copy) {
  const std::string who(backend);
  if (box.rank() != region.extent.rank() || !region.extent.contains(box))
    return absl::InvalidArgumentError(
        absl::StrCat("[", who, "] copy of box ", box.to_string(), " outside the region ", region.extent.to_string()));
  const int64_t size = dtype_size(region.dtype);
  if (region.offset_bytes < 0 || region.offset_bytes + region.extent.volume() * size > buffer_bytes)
    return absl::InvalidArgumentError(absl::StrCat("[", who, "] copy region past the end of its buffer"));
  if (box.empty()) return absl::OkStatus();
  const int rank = box.rank();
  int inner = std::max(rank - 1, 0);  // axes after `inner` are whole in the box
  while (inner > 0 && box.extent(inner) == region.extent.extent(inner)) --inner;
  int64_t run = 1;
  for (int d = inner; d < rank; ++d) run *= box.extent(d);
  std::array<int64_t, kMaxRank> strides{};  // row-major strides of the region, in elements
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) strides[static_cast<size_t>(d)] = s, s *= region.extent.extent(d);
  const int64_t runs = rank == 0 ? 1 : box.volume() / run;
  std::array<int64_t, kMaxRank> idx{};
  for (int64_t r = 0; r < runs; ++r) {
    int64_t rem = r, offset = 0;
    for (int d = inner - 1; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = box.begin(d) + rem % box.extent(d);
      rem /= box.extent(d);
    }
    for (int d = 0; d < rank; ++d) {
      const int64_t i = d < inner ? idx[static_cast<size_t>(d)] : box.begin(d);
      offset += (i - region.extent.begin(d)) * strides[static_cast<size_t>(d)];
    }
    if (absl::Status st = copy(region.offset_bytes + offset * size, r * run * size, run * size); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace tessera::gpu
