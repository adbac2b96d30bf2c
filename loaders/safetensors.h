// safetensors files: memory-mapped, the JSON header parsed and bounds-checked, tensor data never
// read until a caller asks for it.
//
// Layout: u64 little-endian header length N | N bytes of a JSON object (UTF-8, may be padded
// with spaces) | data section. Every header key except "__metadata__" names a tensor:
//   {"dtype": "F16", "shape": [64, 3, 3, 3], "data_offsets": [begin, end]}
// with byte offsets relative to the start of the data section. "__metadata__" is an object of
// string values. Tensor data is row-major and little-endian.
//
// Every byte is untrusted. open()/parse() check that the header length fits the file (and is
// below kMaxHeaderBytes), that the header is a JSON object of well-formed entries, that each
// dtype is known, that every shape's byte size equals its data_offsets range, and that the
// tensors, sorted by offset, tile the data section exactly (no overlap, no gap, nothing after
// the last). Any violation throws tessera::Error "[safetensors] <file>: tensor '<name>': ...".
// Only F32, F16 and BF16 tensors can become graph constants; other dtypes parse (so a file
// holding, say, an I64 counter still opens) but converting them is an Error naming the dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/graph.h"

namespace tessera {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;      // as written in the header: "F32", "F16", "BF16", "I64", ...
  std::optional<DType> dtype;  // set for the dtypes Tessera reads (F32, F16, BF16)
  Shape shape;
  uint64_t offset = 0;  // bytes from the start of the data section
  uint64_t size_bytes = 0;
  const std::byte* data = nullptr;  // into the mapping; alignment is whatever the file gives
};

class SafetensorsFile {
 public:
  // Headers above this are rejected before parsing (the format's own implementation uses the
  // same 100 MB bound).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and parses a file. Throws Error when it cannot be opened or is not valid.
  static SafetensorsFile open(const std::string& path);
  // Parses bytes kept alive by `owner` (null if the caller guarantees their lifetime); `name`
  // appears in error messages.
  static SafetensorsFile parse(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                               std::string name = "<memory>");

  const std::string& name() const { return name_; }
  // Keeps the mapping alive; constants over tensor data hold a copy.
  const std::shared_ptr<const void>& owner() const { return owner_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section

  // Tensors sorted by name, and the names alone.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  std::vector<std::string_view> names() const;
  const SafetensorsTensor* find(std::string_view name) const;    // nullptr when absent
  const SafetensorsTensor& tensor(std::string_view name) const;  // throws Error when absent
  // "__metadata__" entries, sorted by key.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }

  // The tensor's values as f32 (F32 copied, F16/BF16 converted exactly). Throws Error for
  // other dtypes.
  std::vector<float> to_f32(std::string_view name) const;
  // Adds the tensor to `graph` as a constant of dtype `as` (F32, F16 or BF16). When the file
  // already holds that dtype the constant references the mapping (no copy, kept alive by
  // owner()); F16/BF16 -> F32 is converted exactly into a copy. Other conversions, and other
  // file dtypes, throw Error. `shape`, when given, must have the same volume as the stored
  // tensor and replaces its shape (e.g. [C] stored as [C, 1, 1]).
  Tensor add_constant(Graph& graph, std::string_view name, DType as = DType::F32,
                      std::optional<Shape> shape = std::nullopt) const;

 private:
  friend class SafetensorsParser;
  SafetensorsFile() = default;
  [[noreturn]] void fail(std::string_view tensor, std::string_view message) const;

  std::string name_;
  std::shared_ptr<const void> owner_;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> index_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace tessera
