// libFuzzer target: a safetensors file from the bytes through the whole load path. Parse it,
// touch every tensor's first and last byte, read the metadata, convert the small F32/F16/BF16
// tensors with to_f32, add them as graph constants (as f32, as stored, and reshaped to one
// dimension) and read those constants back through a session: every value read must equal
// to_f32 bitwise. Any outcome but a tessera::Error (crash, sanitizer report, other exception,
// a mismatch) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/session.h"
#include "loaders/safetensors.h"

namespace {

using namespace tessera;

// Tensors larger than this are parsed and touched but not converted (keeps iterations fast).
constexpr int64_t kMaxConvertedElements = 1 << 14;
constexpr size_t kMaxConvertedTensors = 8;

[[noreturn]] void finding(const std::string& tensor, const char* what) {
  std::fprintf(stderr, "safetensors_fuzz: tensor '%s': %s\n", tensor.c_str(), what);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A heap copy of exactly the input, so a read past the end is an ASan report.
  auto copy = std::make_shared<std::vector<uint8_t>>(data, data + size);
  std::optional<SafetensorsFile> parsed;
  try {
    parsed.emplace(SafetensorsFile::parse(std::as_bytes(std::span<const uint8_t>(copy->data(), copy->size())),
                                          copy, "fuzz.safetensors"));
  } catch (const Error&) {
    return 0;
  }
  const SafetensorsFile& file = *parsed;
  size_t checksum = 0;
  for (const auto& [key, value] : file.metadata()) checksum += key.size() + value.size();
  for (const SafetensorsTensor& t : file.tensors()) {
    if (file.find(t.name) != &t) finding(t.name, "find() does not return the listed tensor");
    if (t.size_bytes > 0) {
      checksum += static_cast<uint8_t>(t.data[0]);
      checksum += static_cast<uint8_t>(t.data[t.size_bytes - 1]);
    }
  }
  (void)static_cast<volatile size_t>(checksum);

  Graph graph;
  std::vector<std::pair<std::string, std::vector<float>>> expected;
  for (const SafetensorsTensor& t : file.tensors()) {
    if (expected.size() >= kMaxConvertedTensors) break;
    if (shape_volume(t.shape) > kMaxConvertedElements) continue;
    try {
      std::vector<float> values = file.to_f32(t.name);
      if (static_cast<int64_t>(values.size()) != shape_volume(t.shape)) finding(t.name, "to_f32 size");
      Tensor as_f32 = file.add_constant(graph, t.name, DType::F32);
      if (t.dtype) (void)file.add_constant(graph, t.name, *t.dtype);
      Tensor flat = file.add_constant(graph, t.name, DType::F32, Shape{shape_volume(t.shape)});
      if (flat.shape() != Shape{shape_volume(t.shape)}) finding(t.name, "reshaped constant has another shape");
      if (values.empty()) continue;
      const std::string name = "t" + std::to_string(expected.size());
      graph.output(name, as_f32);
      expected.emplace_back(name, std::move(values));
    } catch (const Error&) {
      // Other dtypes (I64, ...) and shapes a constant cannot take are Errors.
    }
  }
  if (expected.empty()) return 0;
  try {
    GraphSession session(graph, SessionOptions{.threads = 1});
    for (const auto& [name, values] : expected) {
      const Shape& shape = graph.node(graph.find_output(name)).shape;
      Box box = Box::of_rank(static_cast<int>(shape.size()));
      for (int d = 0; d < box.rank(); ++d) box[d] = Interval(0, shape[static_cast<size_t>(d)]);
      const std::vector<float> got = session.read<float>(name, box);
      if (got.size() != values.size() || std::memcmp(got.data(), values.data(), values.size() * sizeof(float)) != 0)
        finding(name, "a constant read through a session differs from to_f32");
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "safetensors_fuzz: %s\n", e.what());
    __builtin_trap();  // a valid small constant must be readable
  }
  return 0;
}
