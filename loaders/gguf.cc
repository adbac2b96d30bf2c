#include "loaders/gguf.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/error.h"
#include "loaders/mapped_file.h"

namespace tessera {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is read as little-endian");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 16;       // nesting beyond this is treated as corrupt
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

struct ValueTypeInfo {
  const char* name;
  uint64_t size;  // bytes of a scalar; 0 for string and array
};
// Indexed by GgufValueType.
constexpr ValueTypeInfo kValueTypes[] = {
    {"u8", 1},   {"i8", 1},     {"u16", 2},   {"i16", 2}, {"u32", 4}, {"i32", 4}, {"f32", 4},
    {"bool", 1}, {"string", 0}, {"array", 0}, {"u64", 8}, {"i64", 8}, {"f64", 8},
};

bool known_value_type(uint32_t raw) {
  return raw < std::size(kValueTypes);
}
uint64_t scalar_size(GgufValueType type) {
  return kValueTypes[static_cast<uint32_t>(type)].size;
}

template <typename T>
constexpr GgufValueType value_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return GgufValueType::U8;
  if constexpr (std::is_same_v<T, int8_t>) return GgufValueType::I8;
  if constexpr (std::is_same_v<T, uint16_t>) return GgufValueType::U16;
  if constexpr (std::is_same_v<T, int16_t>) return GgufValueType::I16;
  if constexpr (std::is_same_v<T, uint32_t>) return GgufValueType::U32;
  if constexpr (std::is_same_v<T, int32_t>) return GgufValueType::I32;
  if constexpr (std::is_same_v<T, uint64_t>) return GgufValueType::U64;
  if constexpr (std::is_same_v<T, int64_t>) return GgufValueType::I64;
  if constexpr (std::is_same_v<T, float>) return GgufValueType::F32;
  if constexpr (std::is_same_v<T, double>) return GgufValueType::F64;
  if constexpr (std::is_same_v<T, bool>) return GgufValueType::Bool;
}

// Decodes one little-endian scalar; bools are any non-zero byte.
template <typename T>
T load(const std::byte* p) {
  if constexpr (std::is_same_v<T, bool>) {
    return *p != std::byte{0};
  } else {
    T value;
    std::memcpy(&value, p, sizeof(T));
    return value;
  }
}

// absl here is built without std::string_view support in StrCat.
absl::string_view sv(std::string_view s) {
  return {s.data(), s.size()};
}

// a * b, or false on int64 overflow (both non-negative).
bool mul_ok(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  return known_value_type(static_cast<uint32_t>(type))
             ? kValueTypes[static_cast<uint32_t>(type)].name
             : "?";
}

// ---------------------------------------------------------------------------------------------
// GgufValue

void GgufValue::expect(GgufValueType type) const {
  if (type_ != type) {
    throw Error(absl::StrCat("[gguf] key '", sv(key_), "': expected ", gguf_value_type_name(type),
                             ", found ", gguf_value_type_name(type_)));
  }
}

void GgufValue::expect_array(GgufValueType element) const {
  if (type_ != GgufValueType::Array || element_type_ != element) {
    throw Error(absl::StrCat("[gguf] key '", sv(key_), "': expected array of ",
                             gguf_value_type_name(element), ", found ", gguf_value_type_name(type_),
                             type_ == GgufValueType::Array
                                 ? absl::StrCat(" of ", gguf_value_type_name(element_type_))
                                 : ""));
  }
}

template <typename T>
T GgufValue::scalar() const {
  expect(value_type_of<T>());
  return load<T>(bytes_);
}

template uint8_t GgufValue::scalar() const;
template int8_t GgufValue::scalar() const;
template uint16_t GgufValue::scalar() const;
template int16_t GgufValue::scalar() const;
template uint32_t GgufValue::scalar() const;
template int32_t GgufValue::scalar() const;
template uint64_t GgufValue::scalar() const;
template int64_t GgufValue::scalar() const;
template float GgufValue::scalar() const;
template double GgufValue::scalar() const;
template bool GgufValue::scalar() const;

std::string_view GgufValue::as_string() const {
  expect(GgufValueType::String);
  return {reinterpret_cast<const char*>(bytes_), static_cast<size_t>(size_bytes_)};
}

int64_t GgufValue::as_integer() const {
  switch (type_) {
    case GgufValueType::U8:
      return load<uint8_t>(bytes_);
    case GgufValueType::I8:
      return load<int8_t>(bytes_);
    case GgufValueType::U16:
      return load<uint16_t>(bytes_);
    case GgufValueType::I16:
      return load<int16_t>(bytes_);
    case GgufValueType::U32:
      return load<uint32_t>(bytes_);
    case GgufValueType::I32:
      return load<int32_t>(bytes_);
    case GgufValueType::I64:
      return load<int64_t>(bytes_);
    case GgufValueType::U64: {
      const uint64_t value = load<uint64_t>(bytes_);
      if (value > static_cast<uint64_t>(kInt64Max)) {
        throw Error(absl::StrCat("[gguf] key '", sv(key_), "': u64 value ", value,
                                 " does not fit in int64"));
      }
      return static_cast<int64_t>(value);
    }
    default:
      throw Error(absl::StrCat("[gguf] key '", sv(key_), "': expected an integer, found ",
                               gguf_value_type_name(type_)));
  }
}

GgufValueType GgufValue::element_type() const {
  expect(GgufValueType::Array);
  return element_type_;
}
uint64_t GgufValue::size() const {
  expect(GgufValueType::Array);
  return count_;
}

GgufValue GgufValue::element(uint64_t index) const {
  expect(GgufValueType::Array);
  if (index >= count_) {
    throw Error(absl::StrCat("[gguf] key '", sv(key_), "': index ", index,
                             " out of range for array of ", count_));
  }
  if (element_type_ == GgufValueType::Array) {
    throw Error(
        absl::StrCat("[gguf] key '", sv(key_), "': element() of a nested array; use arrays()"));
  }
  GgufValue value;
  value.key_ = key_;
  value.type_ = element_type_;
  if (element_type_ == GgufValueType::String) {
    const std::string_view s = (*strings_)[index];
    value.bytes_ = reinterpret_cast<const std::byte*>(s.data());
    value.size_bytes_ = s.size();
  } else {
    value.size_bytes_ = scalar_size(element_type_);
    value.bytes_ = bytes_ + index * value.size_bytes_;
  }
  return value;
}

const std::vector<std::string_view>& GgufValue::strings() const {
  expect_array(GgufValueType::String);
  return *strings_;
}

const std::vector<GgufValue>& GgufValue::arrays() const {
  expect_array(GgufValueType::Array);
  return *arrays_;
}

template <typename T>
std::vector<T> GgufValue::to_vector() const {
  expect_array(value_type_of<T>());
  std::vector<T> out(count_);
  for (uint64_t i = 0; i < count_; ++i) out[i] = load<T>(bytes_ + i * sizeof(T));
  return out;
}

template std::vector<uint8_t> GgufValue::to_vector() const;
template std::vector<int8_t> GgufValue::to_vector() const;
template std::vector<uint16_t> GgufValue::to_vector() const;
template std::vector<int16_t> GgufValue::to_vector() const;
template std::vector<uint32_t> GgufValue::to_vector() const;
template std::vector<int32_t> GgufValue::to_vector() const;
template std::vector<uint64_t> GgufValue::to_vector() const;
template std::vector<int64_t> GgufValue::to_vector() const;
template std::vector<float> GgufValue::to_vector() const;
template std::vector<double> GgufValue::to_vector() const;
template std::vector<bool> GgufValue::to_vector() const;

// ---------------------------------------------------------------------------------------------
// GgufTensor

Shape GgufTensor::shape() const {
  return Shape(dims.rbegin(), dims.rend());
}

uint64_t GgufTensor::row_bytes() const {
  return static_cast<uint64_t>(ggml_row_size(type, row_length()));
}

// ---------------------------------------------------------------------------------------------
// Parser: a cursor over the untrusted bytes. Every read checks the remaining length first.

class GgufParser {
 public:
  explicit GgufParser(GgufFile& file) : file_(file), bytes_(file.bytes_) {}

  void run() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    place_tensors();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(absl::StrCat("[gguf] ", file_.name_, ": ", what));
  }

  uint64_t remaining() const { return bytes_.size() - pos_; }

  const std::byte* take(uint64_t n, const std::string& what) {
    if (n > remaining()) {
      fail(absl::StrCat("truncated: ", what, " needs ", n, " bytes at offset ", pos_,
                        " but the file has ", remaining(), " left"));
    }
    const std::byte* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }

  template <typename T>
  T read(const std::string& what) {
    return load<T>(take(sizeof(T), what));
  }

  std::string_view read_string(const std::string& what) {
    const uint64_t length = read<uint64_t>(what);
    if (length > remaining()) {
      fail(absl::StrCat("string length ", length, " of ", what, " at offset ", pos_ - 8,
                        " exceeds the ", remaining(), " bytes left"));
    }
    return {reinterpret_cast<const char*>(take(length, what)), static_cast<size_t>(length)};
  }

  GgufValueType read_value_type(const std::string& what) {
    const uint32_t raw = read<uint32_t>(what);
    if (!known_value_type(raw))
      fail(absl::StrCat("unknown value type ", raw, " for ", what, " at offset ", pos_ - 4));
    return static_cast<GgufValueType>(raw);
  }

  // Rejects counts that cannot possibly fit before allocating anything for them.
  void check_count(uint64_t count, uint64_t min_bytes_each, const std::string& what) {
    if (min_bytes_each > 0 && count > remaining() / min_bytes_each) {
      fail(absl::StrCat(what, " count ", count, " cannot fit in the ", remaining(),
                        " bytes left (at offset ", pos_, ")"));
    }
  }

  GgufValue read_value(GgufValueType type, std::string_view key, int depth) {
    GgufValue value;
    value.key_ = key;
    value.type_ = type;
    if (type == GgufValueType::String) {
      const std::string_view s = read_string(absl::StrCat("string value of '", sv(key), "'"));
      value.bytes_ = reinterpret_cast<const std::byte*>(s.data());
      value.size_bytes_ = s.size();
    } else if (type != GgufValueType::Array) {
      value.size_bytes_ = scalar_size(type);
      value.bytes_ = take(value.size_bytes_, absl::StrCat("value of '", sv(key), "'"));
    } else {
      read_array(value, key, depth);
    }
    return value;
  }

  void read_array(GgufValue& value, std::string_view key, int depth) {
    if (depth >= kMaxArrayDepth)
      fail(absl::StrCat("arrays of '", sv(key), "' nest deeper than ", kMaxArrayDepth));
    const std::string what = absl::StrCat("array '", sv(key), "'");
    value.element_type_ = read_value_type(absl::StrCat("element type of ", what));
    value.count_ = read<uint64_t>(absl::StrCat("length of ", what));
    const GgufValueType element = value.element_type_;
    if (element == GgufValueType::String) {
      check_count(value.count_, 8, what);
      auto strings = std::make_shared<std::vector<std::string_view>>();
      strings->reserve(value.count_);
      for (uint64_t i = 0; i < value.count_; ++i) strings->push_back(read_string(what));
      value.strings_ = std::move(strings);
    } else if (element == GgufValueType::Array) {
      check_count(value.count_, 12, what);  // each nested array has at least a type and a count
      auto arrays = std::make_shared<std::vector<GgufValue>>();
      arrays->reserve(value.count_);
      for (uint64_t i = 0; i < value.count_; ++i)
        arrays->push_back(read_value(element, key, depth + 1));
      value.arrays_ = std::move(arrays);
    } else {
      const uint64_t each = scalar_size(element);
      check_count(value.count_, each, what);
      value.size_bytes_ = value.count_ * each;
      value.bytes_ = take(value.size_bytes_, what);
    }
  }

  void read_header() {
    const uint32_t magic = read<uint32_t>("magic");
    if (magic != kMagic)
      fail(absl::StrCat("not a GGUF file (magic 0x", absl::Hex(magic, absl::kZeroPad8), ")"));
    const uint32_t version = read<uint32_t>("version");
    if (version == 0x02000000u || version == 0x03000000u)
      fail("big-endian GGUF files are not supported");
    if (version != 2 && version != 3)
      fail(absl::StrCat("unsupported GGUF version ", version, " (need 2 or 3)"));
    file_.version_ = version;
    tensor_count_ = read<uint64_t>("tensor count");
    kv_count_ = read<uint64_t>("metadata count");
    // Smallest key/value: 8-byte key length, 4-byte type, 1-byte value. Smallest tensor info:
    // 8-byte name length, 4-byte n_dims, 4-byte type, 8-byte offset.
    check_count(kv_count_, 13, "metadata");
    check_count(tensor_count_, 24, "tensor");
  }

  void read_metadata() {
    file_.metadata_.reserve(kv_count_);
    for (uint64_t i = 0; i < kv_count_; ++i) {
      const std::string_view key = read_string(absl::StrCat("key of metadata entry ", i));
      const GgufValueType type = read_value_type(absl::StrCat("value type of '", sv(key), "'"));
      GgufValue value = read_value(type, key, 0);
      if (!file_.key_index_.emplace(key, file_.metadata_.size()).second) {
        fail(absl::StrCat("duplicate metadata key '", sv(key), "'"));
      }
      file_.metadata_.push_back({key, std::move(value)});
    }
  }

  void read_alignment() {
    const GgufValue* value = file_.find("general.alignment");
    if (value == nullptr) return;
    if (value->type() != GgufValueType::U32) {
      fail(absl::StrCat("general.alignment must be u32, found ",
                        gguf_value_type_name(value->type())));
    }
    const uint32_t alignment = value->as_u32();
    if (alignment == 0 || !std::has_single_bit(alignment)) {
      fail(absl::StrCat("general.alignment ", alignment, " is not a power of two"));
    }
    file_.alignment_ = alignment;
  }

  void read_tensor_infos() {
    check_count(tensor_count_, 24, "tensor");
    file_.tensors_.reserve(tensor_count_);
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      GgufTensor tensor;
      tensor.name = read_string(absl::StrCat("name of tensor ", i));
      const std::string what = absl::StrCat("tensor '", sv(tensor.name), "'");
      const uint32_t n_dims = read<uint32_t>(absl::StrCat("n_dims of ", what));
      if (n_dims > kMaxDims)
        fail(absl::StrCat(what, " has ", n_dims, " dims (at most ", kMaxDims, ")"));
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t dim = read<uint64_t>(absl::StrCat("dims of ", what));
        if (dim > static_cast<uint64_t>(kInt64Max) ||
            !mul_ok(tensor.element_count, static_cast<int64_t>(dim), &tensor.element_count)) {
          fail(absl::StrCat(what, " element count overflows int64"));
        }
        tensor.dims.push_back(static_cast<int64_t>(dim));
      }
      const uint32_t type = read<uint32_t>(absl::StrCat("type of ", what));
      const GgmlTypeTraits* traits = ggml_type_traits(type);
      if (traits == nullptr) fail(absl::StrCat(what, " has unknown ggml type ", type));
      tensor.type = traits->type;
      tensor.offset = read<uint64_t>(absl::StrCat("offset of ", what));
      if (!file_.tensor_index_.emplace(tensor.name, file_.tensors_.size()).second) {
        fail(absl::StrCat("duplicate tensor name '", sv(tensor.name), "'"));
      }
      file_.tensors_.push_back(std::move(tensor));
    }
  }

  // Checks each tensor's size, alignment and range against the data section.
  void place_tensors() {
    const uint64_t alignment = file_.alignment_;
    const uint64_t data_offset =
        pos_ % alignment == 0 ? pos_ : pos_ + (alignment - pos_ % alignment);
    if (data_offset > bytes_.size()) {
      if (!file_.tensors_.empty()) {
        fail(absl::StrCat("data section at offset ", data_offset,
                          " starts past the end of the file (", bytes_.size(), " bytes)"));
      }
      file_.data_offset_ = bytes_.size();
      return;
    }
    file_.data_offset_ = data_offset;
    const uint64_t data_size = bytes_.size() - data_offset;
    for (GgufTensor& tensor : file_.tensors_) {
      const std::string what = absl::StrCat("tensor '", sv(tensor.name), "'");
      const GgmlTypeTraits& traits = ggml_traits(tensor.type);
      const int64_t row = tensor.row_length();
      if (row % traits.block_size != 0) {
        fail(absl::StrCat(what, ": row of ", row, " elements is not a multiple of the ",
                          traits.name, " block size ", traits.block_size));
      }
      int64_t size = 0;
      if (!mul_ok(tensor.element_count / traits.block_size, traits.block_bytes, &size)) {
        fail(absl::StrCat(what, ": byte size overflows int64"));
      }
      tensor.size_bytes = static_cast<uint64_t>(size);
      if (tensor.offset % alignment != 0) {
        fail(absl::StrCat(what, ": offset ", tensor.offset, " is not a multiple of the alignment ",
                          alignment));
      }
      if (tensor.offset > data_size || tensor.size_bytes > data_size - tensor.offset) {
        fail(absl::StrCat(what, ": ", tensor.size_bytes, " bytes at data offset ", tensor.offset,
                          " run past the end of the data section (", data_size, " bytes)"));
      }
      tensor.data = bytes_.data() + data_offset + tensor.offset;
    }
    reject_overlaps();
  }

  // Two tensors sharing bytes mean a corrupt table (a writer never aliases tensors).
  void reject_overlaps() const {
    std::vector<const GgufTensor*> order;
    for (const GgufTensor& t : file_.tensors_)
      if (t.size_bytes > 0) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensor& prev = *order[i - 1];
      const GgufTensor& next = *order[i];
      if (next.offset < prev.offset + prev.size_bytes)
        fail(absl::StrCat("tensors '", sv(prev.name), "' (bytes ", prev.offset, "..", prev.offset + prev.size_bytes,
                          ") and '", sv(next.name), "' (from ", next.offset, ") overlap"));
    }
  }

  GgufFile& file_;
  std::span<const std::byte> bytes_;
  uint64_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
};

// ---------------------------------------------------------------------------------------------
// GgufFile

GgufFile GgufFile::parse(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         std::string name) {
  GgufFile file;
  file.name_ = std::move(name);
  file.owner_ = std::move(owner);
  file.bytes_ = bytes;
  GgufParser(file).run();
  return file;
}

GgufFile GgufFile::open(const std::string& path) {
  MappedFile file = map_file(path, "gguf");
  return parse(file.bytes, std::move(file.owner), path);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr)
    throw Error(absl::StrCat("[gguf] ", name_, ": missing metadata key '", sv(key), "'"));
  return *value;
}

template <typename T>
std::vector<T> GgufFile::get_array(std::string_view key) const {
  return get(key).to_vector<T>();
}

template std::vector<uint8_t> GgufFile::get_array(std::string_view) const;
template std::vector<int8_t> GgufFile::get_array(std::string_view) const;
template std::vector<uint16_t> GgufFile::get_array(std::string_view) const;
template std::vector<int16_t> GgufFile::get_array(std::string_view) const;
template std::vector<uint32_t> GgufFile::get_array(std::string_view) const;
template std::vector<int32_t> GgufFile::get_array(std::string_view) const;
template std::vector<uint64_t> GgufFile::get_array(std::string_view) const;
template std::vector<int64_t> GgufFile::get_array(std::string_view) const;
template std::vector<float> GgufFile::get_array(std::string_view) const;
template std::vector<double> GgufFile::get_array(std::string_view) const;
template std::vector<bool> GgufFile::get_array(std::string_view) const;

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* tensor = find_tensor(name);
  if (tensor == nullptr)
    throw Error(absl::StrCat("[gguf] ", name_, ": no tensor named '", sv(name), "'"));
  return *tensor;
}

}  // namespace tessera
