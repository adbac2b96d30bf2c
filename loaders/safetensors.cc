#include "loaders/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loaders/mapped_file.h"

namespace tessera {
namespace {

struct DtypeInfo {
  std::string_view name;
  uint64_t size;
  std::optional<DType> dtype;
};

// Every dtype the format defines; only the first three become graph constants.
constexpr DtypeInfo kDtypes[] = {
    {"F32", 4, DType::F32},    {"F16", 2, DType::F16},       {"BF16", 2, DType::BF16},
    {"F64", 8, std::nullopt},  {"I64", 8, std::nullopt},     {"U64", 8, std::nullopt},
    {"I32", 4, std::nullopt},  {"U32", 4, std::nullopt},     {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},  {"I8", 1, std::nullopt},      {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const DtypeInfo* find_dtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes)
    if (info.name == name) return &info;
  return nullptr;
}

// Deepest nesting of objects/arrays outside strings. The parser below is handed only headers
// of bounded depth, so a hostile header cannot exhaust the stack.
int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

absl::string_view sv(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

}  // namespace

class SafetensorsParser {
 public:
  explicit SafetensorsParser(SafetensorsFile& file, std::span<const std::byte> bytes)
      : file_(file), bytes_(bytes) {}

  void run() {
    if (bytes_.size() < 8)
      fail("", absl::StrCat("file of ", bytes_.size(),
                            " bytes is shorter than the 8-byte header length"));
    const uint64_t header_bytes = read_u64_le(bytes_.data());
    if (header_bytes > SafetensorsFile::kMaxHeaderBytes)
      fail("", absl::StrCat("header length ", header_bytes, " exceeds the limit of ",
                            SafetensorsFile::kMaxHeaderBytes, " bytes"));
    if (header_bytes > bytes_.size() - 8)
      fail("", absl::StrCat("header length ", header_bytes, " runs past the end of the file (",
                            bytes_.size(), " bytes)"));
    file_.data_offset_ = 8 + header_bytes;
    const std::string_view text(reinterpret_cast<const char*>(bytes_.data()) + 8, header_bytes);
    if (text.empty() || text.front() != '{') fail("", "header is not a JSON object");
    if (json_depth(text) > 4) fail("", "header nests deeper than a safetensors header can");
    nlohmann::json header =
        nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded()) fail("", "header is not valid JSON");
    if (!header.is_object()) fail("", "header is not a JSON object");
    for (auto& [key, value] : header.items()) {
      if (key == "__metadata__")
        read_metadata(value);
      else
        read_tensor(key, value);
    }
    check_layout();
    std::sort(
        file_.tensors_.begin(), file_.tensors_.end(),
        [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.name < b.name; });
    for (size_t i = 0; i < file_.tensors_.size(); ++i) file_.index_[file_.tensors_[i].name] = i;
    std::sort(file_.metadata_.begin(), file_.metadata_.end());
  }

 private:
  [[noreturn]] void fail(std::string_view tensor, std::string_view message) const {
    file_.fail(tensor, message);
  }

  void read_metadata(const nlohmann::json& value) {
    if (!value.is_object()) fail("", "__metadata__ is not an object");
    for (const auto& [key, entry] : value.items()) {
      if (!entry.is_string())
        fail("", absl::StrCat("__metadata__ entry '", key, "' is not a string"));
      file_.metadata_.emplace_back(key, entry.get<std::string>());
    }
  }

  void read_tensor(const std::string& name, const nlohmann::json& value) {
    if (!value.is_object()) fail(name, "entry is not an object");
    for (const auto& [key, field] : value.items())
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        fail(name, absl::StrCat("unknown field '", key, "'"));
    auto field = [&](const char* key) -> const nlohmann::json& {
      auto it = value.find(key);
      if (it == value.end()) fail(name, absl::StrCat("missing '", key, "'"));
      return *it;
    };
    SafetensorsTensor t;
    t.name = name;
    const nlohmann::json& dtype = field("dtype");
    if (!dtype.is_string()) fail(name, "dtype is not a string");
    t.dtype_name = dtype.get<std::string>();
    const DtypeInfo* info = find_dtype(t.dtype_name);
    if (info == nullptr) fail(name, absl::StrCat("unknown dtype '", t.dtype_name, "'"));
    t.dtype = info->dtype;

    const nlohmann::json& shape = field("shape");
    if (!shape.is_array()) fail(name, "shape is not an array");
    if (shape.size() > static_cast<size_t>(kMaxRank))
      fail(name, absl::StrCat("shape has ", shape.size(), " dims, more than the ", kMaxRank,
                              " supported"));
    // Element count with overflow checks: dims are bounded by the file size once multiplied out.
    uint64_t bytes = info->size;
    bool overflow = false;
    for (const nlohmann::json& dim : shape) {
      if (!dim.is_number_unsigned()) fail(name, "shape entries must be non-negative integers");
      const uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        overflow = true;
      else if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / d)
        overflow = true;
      else
        bytes *= d;
      t.shape.push_back(
          static_cast<int64_t>(std::min<uint64_t>(d, std::numeric_limits<int64_t>::max())));
    }
    if (overflow) fail(name, absl::StrCat("shape ", shape.dump(), " overflows"));

    const nlohmann::json& offsets = field("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      fail(name, "data_offsets must be two non-negative integers");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const uint64_t data_bytes = bytes_.size() - file_.data_offset_;
    if (begin > end) fail(name, absl::StrCat("data_offsets [", begin, ", ", end, "] are reversed"));
    if (end > data_bytes)
      fail(name, absl::StrCat("data_offsets [", begin, ", ", end,
                              "] run past the end of the data (", data_bytes, " bytes)"));
    if (end - begin != bytes)
      fail(name,
           absl::StrCat("shape ", shape.dump(), " of ", t.dtype_name, " needs ", bytes,
                        " bytes but data_offsets [", begin, ", ", end, "] hold ", end - begin));
    t.offset = begin;
    t.size_bytes = bytes;
    t.data = bytes_.data() + file_.data_offset_ + begin;
    file_.tensors_.push_back(std::move(t));
  }

  // The tensors, in offset order, must tile the data section exactly.
  void check_layout() {
    std::vector<const SafetensorsTensor*> by_offset;
    for (const SafetensorsTensor& t : file_.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
                return a->offset != b->offset ? a->offset < b->offset
                                              : a->size_bytes < b->size_bytes;
              });
    uint64_t cursor = 0;
    const SafetensorsTensor* previous = nullptr;
    for (const SafetensorsTensor* t : by_offset) {
      if (t->offset < cursor)
        fail(t->name, absl::StrCat("data [", t->offset, ", ", t->offset + t->size_bytes,
                                   ") overlaps tensor '", previous->name, "'"));
      if (t->offset > cursor)
        fail(t->name,
             absl::StrCat("data starts at ", t->offset, " but the previous tensor ends at ", cursor,
                          " (gap in the data section)"));
      cursor = t->offset + t->size_bytes;
      previous = t;
    }
    const uint64_t data_bytes = bytes_.size() - file_.data_offset_;
    if (cursor != data_bytes)
      fail("", absl::StrCat("tensors cover ", cursor, " bytes of a data section of ", data_bytes,
                            " bytes"));
  }

  SafetensorsFile& file_;
  std::span<const std::byte> bytes_;
};

void SafetensorsFile::fail(std::string_view tensor, std::string_view message) const {
  if (tensor.empty()) throw Error(absl::StrCat("[safetensors] ", name_, ": ", sv(message)));
  throw Error(absl::StrCat("[safetensors] ", name_, ": tensor '", sv(tensor), "': ", sv(message)));
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes,
                                       std::shared_ptr<const void> owner, std::string name) {
  SafetensorsFile file;
  file.name_ = std::move(name);
  file.owner_ = std::move(owner);
  SafetensorsParser(file, bytes).run();
  return file;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  MappedFile file = map_file(path, "safetensors");
  return parse(file.bytes, std::move(file.owner), path);
}

std::vector<std::string_view> SafetensorsFile::names() const {
  std::vector<std::string_view> out;
  out.reserve(tensors_.size());
  for (const SafetensorsTensor& t : tensors_) out.push_back(t.name);
  return out;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(sv(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) fail(name, "no such tensor");
  return *t;
}

std::vector<float> SafetensorsFile::to_f32(std::string_view name) const {
  const SafetensorsTensor& t = tensor(name);
  const size_t n = static_cast<size_t>(shape_volume(t.shape));
  std::vector<float> out(n);
  if (t.dtype == DType::F32) {
    if (n > 0) std::memcpy(out.data(), t.data, n * sizeof(float));
  } else if (t.dtype == DType::F16 || t.dtype == DType::BF16) {
    const bool half = t.dtype == DType::F16;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t bits = static_cast<uint16_t>(static_cast<uint16_t>(t.data[2 * i]) |
                                                  static_cast<uint16_t>(t.data[2 * i + 1]) << 8);
      out[i] = half ? half_to_float(bits) : bf16_to_float(bits);
    }
  } else {
    fail(name, absl::StrCat("dtype ", t.dtype_name, " is not supported (F32, F16 and BF16 are)"));
  }
  return out;
}

Tensor SafetensorsFile::add_constant(Graph& graph, std::string_view name, DType as,
                                     std::optional<Shape> shape) const {
  const SafetensorsTensor& t = tensor(name);
  if (!t.dtype)
    fail(name, absl::StrCat("dtype ", t.dtype_name, " is not supported (F32, F16 and BF16 are)"));
  if (shape && shape_volume(*shape) != shape_volume(t.shape))
    fail(name,
         absl::StrCat("cannot view shape ", shape_string(t.shape), " as ", shape_string(*shape)));
  const Shape& out_shape = shape ? *shape : t.shape;
  if (*t.dtype == as) {
    // Kernels load whole elements, so data off its element alignment is copied instead.
    if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(dtype_size(as)) == 0)
      return graph.constant_external(out_shape, as, t.data, owner_);
    return graph.constant(out_shape, as, std::span<const std::byte>(t.data, t.size_bytes));
  }
  if (as != DType::F32)
    fail(name,
         absl::StrCat("cannot convert ", t.dtype_name, " to ", dtype_name(as), " (only to f32)"));
  const std::vector<float> values = to_f32(name);
  return graph.constant(out_shape, as, std::as_bytes(std::span<const float>(values)));
}

}  // namespace tessera
