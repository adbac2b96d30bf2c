// GGUF files (versions 2 and 3, little-endian): memory-mapped, header, metadata and tensor
// table parsed eagerly and bounds-checked, tensor data never copied.
//
// Layout: "GGUF" | u32 version | u64 tensor_count | u64 kv_count | kv_count key/values |
// tensor_count tensor infos | padding to `general.alignment` (default 32) | data section.
// A key/value is a string key, a u32 value type and the value; a string is a u64 byte length
// and that many bytes (not NUL-terminated); an array is a u32 element type, a u64 count and
// the elements (arrays may nest). A tensor info is a string name, u32 n_dims (<= 4), n_dims
// u64 dims (ggml order: dims[0] is the contiguous one), u32 ggml type and a u64 offset into
// the data section, a multiple of the alignment.
//
// Every byte is untrusted: anything truncated, out of range, misaligned, overflowing or of an
// unknown type throws tessera::Error with a message starting "[gguf] ". Parsing never aborts.
// All string_views, value views and tensor pointers point into the mapping and stay valid as
// long as the GgufFile (or any copy of owner()) lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/dtype.h"
#include "loaders/quant.h"

namespace tessera {

enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

const char* gguf_value_type_name(GgufValueType type);  // "u32", "string", "array", ...

// A metadata value: a view of its bytes inside the mapping.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }

  // Scalars. Each requires exactly its type and throws Error otherwise.
  uint8_t as_u8() const { return scalar<uint8_t>(); }
  int8_t as_i8() const { return scalar<int8_t>(); }
  uint16_t as_u16() const { return scalar<uint16_t>(); }
  int16_t as_i16() const { return scalar<int16_t>(); }
  uint32_t as_u32() const { return scalar<uint32_t>(); }
  int32_t as_i32() const { return scalar<int32_t>(); }
  uint64_t as_u64() const { return scalar<uint64_t>(); }
  int64_t as_i64() const { return scalar<int64_t>(); }
  float as_f32() const { return scalar<float>(); }
  double as_f64() const { return scalar<double>(); }
  bool as_bool() const { return scalar<bool>(); }
  std::string_view as_string() const;
  // Any integer type whose value fits in int64 (u64 above INT64_MAX throws).
  int64_t as_integer() const;

  // Arrays (type() == Array; otherwise these throw).
  GgufValueType element_type() const;
  uint64_t size() const;
  // Element `index` of an array of scalars or strings, as a scalar/string value.
  GgufValue element(uint64_t index) const;
  // All elements of an array of strings.
  const std::vector<std::string_view>& strings() const;
  // All elements of an array of arrays.
  const std::vector<GgufValue>& arrays() const;
  // All elements of an array of T (uint8_t ... int64_t, float, double, bool); the element type
  // must match T exactly.
  template <typename T>
  std::vector<T> to_vector() const;

 private:
  friend class GgufParser;
  template <typename T>
  T scalar() const;  // T as in to_vector
  void expect(GgufValueType type) const;
  void expect_array(GgufValueType element) const;

  std::string_view key_;  // for error messages
  GgufValueType type_ = GgufValueType::U8;
  GgufValueType element_type_ = GgufValueType::U8;  // arrays only
  uint64_t count_ = 0;                              // arrays only
  const std::byte* bytes_ = nullptr;  // scalar bytes, string bytes or packed scalar elements
  uint64_t size_bytes_ = 0;
  // Shared so that values copy cheaply; immutable after parsing.
  std::shared_ptr<const std::vector<std::string_view>> strings_;  // arrays of strings
  std::shared_ptr<const std::vector<GgufValue>> arrays_;          // arrays of arrays
};

struct GgufKeyValue {
  std::string_view key;
  GgufValue value;
};

struct GgufTensor {
  std::string_view name;
  Shape dims;  // ggml order: dims[0] is the contiguous (innermost) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // bytes from the start of the data section
  // Into the mapping. Its file offset is a multiple of GgufFile::alignment(); a mapped file
  // starts on a page, so for open() files the pointer itself is that aligned.
  const std::byte* data = nullptr;
  uint64_t size_bytes = 0;
  int64_t element_count = 1;

  Shape shape() const;  // row-major (outermost first), i.e. dims reversed
  int64_t row_length() const { return dims.empty() ? 1 : dims[0]; }  // elements per row
  int64_t row_count() const { return element_count / (row_length() == 0 ? 1 : row_length()); }
  uint64_t row_bytes() const;  // bytes of one row
};

class GgufFile {
 public:
  // Maps and parses a file. Throws Error ("[gguf] <path>: ...") when it cannot be opened or
  // is not a valid GGUF file.
  static GgufFile open(const std::string& path);
  // Parses bytes kept alive by `owner` (which may be null if the caller guarantees lifetime);
  // `name` is used in error messages.
  static GgufFile parse(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                        std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  uint64_t file_size() const { return bytes_.size(); }
  const std::string& name() const { return name_; }
  // Keeps the mapping alive; hand to Graph::constant_external together with a tensor's data.
  const std::shared_ptr<const void>& owner() const { return owner_; }

  // Metadata, in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  bool has(std::string_view key) const { return key_index_.contains(key); }
  const GgufValue* find(std::string_view key) const;  // nullptr when absent
  const GgufValue& get(std::string_view key) const;   // throws Error when absent

  // Typed getters: the key must exist with exactly this type; clear Error otherwise.
  uint8_t get_u8(std::string_view key) const { return get(key).as_u8(); }
  int8_t get_i8(std::string_view key) const { return get(key).as_i8(); }
  uint16_t get_u16(std::string_view key) const { return get(key).as_u16(); }
  int16_t get_i16(std::string_view key) const { return get(key).as_i16(); }
  uint32_t get_u32(std::string_view key) const { return get(key).as_u32(); }
  int32_t get_i32(std::string_view key) const { return get(key).as_i32(); }
  uint64_t get_u64(std::string_view key) const { return get(key).as_u64(); }
  int64_t get_i64(std::string_view key) const { return get(key).as_i64(); }
  float get_f32(std::string_view key) const { return get(key).as_f32(); }
  double get_f64(std::string_view key) const { return get(key).as_f64(); }
  bool get_bool(std::string_view key) const { return get(key).as_bool(); }
  std::string_view get_string(std::string_view key) const { return get(key).as_string(); }
  // Any integer type whose value fits in int64.
  int64_t get_integer(std::string_view key) const { return get(key).as_integer(); }

  const std::vector<std::string_view>& get_string_array(std::string_view key) const {
    return get(key).strings();
  }
  std::vector<int32_t> get_i32_array(std::string_view key) const { return get_array<int32_t>(key); }
  std::vector<uint32_t> get_u32_array(std::string_view key) const {
    return get_array<uint32_t>(key);
  }
  std::vector<int64_t> get_i64_array(std::string_view key) const { return get_array<int64_t>(key); }
  std::vector<float> get_f32_array(std::string_view key) const { return get_array<float>(key); }
  template <typename T>
  std::vector<T> get_array(std::string_view key) const;  // see GgufValue::to_vector

  // Tensors, in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;  // nullptr when absent
  const GgufTensor& tensor(std::string_view name) const;       // throws Error when absent

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::string name_;
  std::shared_ptr<const void> owner_;
  std::span<const std::byte> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  absl::flat_hash_map<std::string_view, size_t> key_index_;
  std::vector<GgufTensor> tensors_;
  absl::flat_hash_map<std::string_view, size_t> tensor_index_;
};

}  // namespace tessera
