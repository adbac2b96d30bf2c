// safetensors reader: valid files written by the test, graph constants over them, and every
// validation rule on corrupt input (each raising tessera::Error "[safetensors] ...", never
// crashing or reading outside the buffer).
#include "loaders/safetensors.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/session.h"

using namespace tessera;

namespace {

using Bytes = std::vector<uint8_t>;

void put_u64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A file: the header length (the header's own unless overridden), the header, the data.
Bytes st_file(const std::string& header, const Bytes& data,
              std::optional<uint64_t> length = std::nullopt) {
  Bytes out;
  put_u64(out, length.value_or(header.size()));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class T>
void append(Bytes& out, const std::vector<T>& values) {
  const size_t at = out.size();
  out.resize(at + values.size() * sizeof(T));
  std::memcpy(out.data() + at, values.data(), values.size() * sizeof(T));
}

// Four tensors: a f32 [2, 3] at 0, b f16 [4] at 24, c bf16 [2, 2] at 32, d i64 [1] at 40;
// the header is padded with spaces to a multiple of 8, as the reference writer does.
Bytes small_file() {
  std::string header = R"({"__metadata__":{"format":"pt","source":"test"},)"
                       R"("c":{"dtype":"BF16","shape":[2,2],"data_offsets":[32,40]},)"
                       R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                       R"("b":{"dtype":"F16","shape":[4],"data_offsets":[24,32]},)"
                       R"("d":{"dtype":"I64","shape":[1],"data_offsets":[40,48]}})";
  while (header.size() % 8 != 0) header.push_back(' ');
  Bytes data;
  append<float>(data, {1, 2, 3, 4, 5, -6});
  append<uint16_t>(data, {0x3c00, 0xc000, 0x3800, 0x0000});  // f16: 1, -2, 0.5, 0
  append<uint16_t>(data, {0x3f80, 0x4040, 0xbf00, 0x4780});  // bf16: 1, 3, -0.5, 65536
  append<int64_t>(data, {42});
  return st_file(header, data);
}

// Parses a heap copy of exactly `bytes`, so any read past the end is a real overrun.
SafetensorsFile parse_bytes(const Bytes& bytes) {
  auto copy = std::make_shared<Bytes>(bytes);
  return SafetensorsFile::parse(std::as_bytes(std::span<const uint8_t>(copy->data(), copy->size())),
                                copy, "test.safetensors");
}

// Asserts that parsing throws tessera::Error "[safetensors] test.safetensors: ..." containing
// `needle`.
void check_rejects(const Bytes& bytes, const std::string& needle) {
  try {
    parse_bytes(bytes);
    FAIL("parsed a corrupt file; expected an error containing: " << needle);
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.rfind("[safetensors] test.safetensors: ", 0) == 0, message);
    CHECK_MESSAGE(message.find(needle) != std::string::npos,
                  message << "  (wanted: " << needle << ")");
  }
}

// A one-tensor file whose entry for "t" is `entry`, with `data_bytes` bytes of data.
Bytes one_tensor(const std::string& entry, size_t data_bytes = 8) {
  return st_file(R"({"t":)" + entry + "}", Bytes(data_bytes, 0));
}

std::string temp_path(const std::string& tag) {
  return "/tmp/tessera_safetensors_" + tag + "_" + std::to_string(::getpid()) + ".safetensors";
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("loaders: safetensors lists tensors with dtype, shape and bytes") {
  const SafetensorsFile f = parse_bytes(small_file());
  CHECK(f.names() == std::vector<std::string_view>{"a", "b", "c", "d"});
  CHECK(f.metadata() ==
        std::vector<std::pair<std::string, std::string>>{{"format", "pt"}, {"source", "test"}});
  const SafetensorsTensor& a = f.tensor("a");
  CHECK(a.dtype == DType::F32);
  CHECK(a.dtype_name == "F32");
  CHECK(a.shape == Shape{2, 3});
  CHECK(a.offset == 0);
  CHECK(a.size_bytes == 24);
  CHECK(f.data_offset() % 8 == 0);
  CHECK(f.tensor("b").data - a.data == 24);
  CHECK(f.tensor("c").dtype == DType::BF16);
  CHECK_FALSE(f.tensor("d").dtype.has_value());  // I64 parses, but is not a Tessera dtype here
  CHECK(f.tensor("d").dtype_name == "I64");
  CHECK(f.find("missing") == nullptr);
  CHECK_THROWS_WITH_AS(f.tensor("missing"),
                       "[safetensors] test.safetensors: tensor 'missing': no such tensor", Error);

  CHECK(f.to_f32("a") == std::vector<float>{1, 2, 3, 4, 5, -6});
  CHECK(f.to_f32("b") == std::vector<float>{1, -2, 0.5f, 0});
  CHECK(f.to_f32("c") == std::vector<float>{1, 3, -0.5f, 65536});
  CHECK_THROWS_WITH_AS(f.to_f32("d"), doctest::Contains("tensor 'd': dtype I64 is not supported"),
                       Error);
}

TEST_CASE("loaders: safetensors tensors become graph constants, f32 without a copy") {
  const SafetensorsFile f = parse_bytes(small_file());
  Graph g;
  Tensor a = f.add_constant(g, "a");
  CHECK(g.constant_data(a.node().constant).data == f.tensor("a").data);  // references the mapping
  Tensor b = f.add_constant(g, "b", DType::F32, Shape{2, 2});            // f16 converted, reshaped
  CHECK(b.dtype() == DType::F32);
  CHECK(b.shape() == Shape{2, 2});
  Tensor b16 = f.add_constant(g, "b", DType::F16);  // kept as stored
  CHECK(g.constant_data(b16.node().constant).data == f.tensor("b").data);
  Tensor c = f.add_constant(g, "c");
  Tensor x = g.input("x", {2, 2}, DType::F32);
  g.output("a", a + g.scalar(0.0f));
  g.output("bc", x + b + c);
  GraphSession s(g);
  s.write("x", Box{{0, 2}, {0, 2}}, std::vector<float>{0, 0, 0, 0});
  CHECK(s.read<float>("a", Box{{0, 2}, {0, 3}}) == std::vector<float>{1, 2, 3, 4, 5, -6});
  CHECK(s.read<float>("bc", Box{{0, 2}, {0, 2}}) == std::vector<float>{2, 1, 0, 65536});

  CHECK_THROWS_WITH_AS(f.add_constant(g, "d"),
                       doctest::Contains("tensor 'd': dtype I64 is not supported"), Error);
  CHECK_THROWS_WITH_AS(f.add_constant(g, "a", DType::F16),
                       doctest::Contains("tensor 'a': cannot convert F32"), Error);
  CHECK_THROWS_WITH_AS(f.add_constant(g, "a", DType::F32, Shape{4}),
                       doctest::Contains("cannot view shape"), Error);
}

TEST_CASE("loaders: safetensors data off its element alignment is copied, not referenced") {
  // A 54-byte header puts the data section at offset 62: the f32 tensor is misaligned.
  const Bytes bytes =
      st_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", {0, 0, 0x80, 0x3f});
  const SafetensorsFile f = parse_bytes(bytes);
  REQUIRE(reinterpret_cast<uintptr_t>(f.tensor("t").data) % 4 != 0);
  Graph g;
  Tensor t = f.add_constant(g, "t");
  const ConstantData& data = g.constant_data(t.node().constant);
  CHECK(reinterpret_cast<uintptr_t>(data.data) % 4 == 0);
  float v;
  std::memcpy(&v, data.data, 4);
  CHECK(v == 1.0f);
}

TEST_CASE("loaders: safetensors open maps the file, and bad paths are errors") {
  const std::string path = temp_path("map");
  write_file(path, small_file());
  std::shared_ptr<const void> owner;
  const std::byte* data = nullptr;
  {
    const SafetensorsFile f = SafetensorsFile::open(path);
    CHECK(f.name() == path);
    owner = f.owner();
    data = f.tensor("a").data;
  }
  float first;
  std::memcpy(&first, data, 4);  // still mapped through `owner`
  CHECK(first == 1.0f);
  owner.reset();
  write_file(path, Bytes{1, 2, 3});
  CHECK_THROWS_WITH_AS(SafetensorsFile::open(path),
                       doctest::Contains(("[safetensors] " + path).c_str()), Error);
  std::remove(path.c_str());
  CHECK_THROWS_WITH_AS(SafetensorsFile::open(path), doctest::Contains("cannot open"), Error);
  CHECK_THROWS_WITH_AS(SafetensorsFile::open("/tmp"), doctest::Contains("not a regular file"),
                       Error);
}

TEST_CASE("loaders: safetensors truncated at every offset is rejected") {
  const Bytes bytes = small_file();
  parse_bytes(bytes);  // the whole file is fine
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    CAPTURE(cut);
    CHECK_THROWS_WITH_AS(
        parse_bytes(Bytes(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut))),
        doctest::Contains("[safetensors] test.safetensors: "), Error);
  }
}

TEST_CASE("loaders: safetensors rejects bad header lengths and non-object headers") {
  const std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  check_rejects(st_file(header, Bytes(8, 0), header.size() + 9), "runs past the end of the file");
  check_rejects(st_file(header, Bytes(8, 0), uint64_t{1} << 40), "exceeds the limit");
  check_rejects(st_file(header, Bytes(8, 0), ~uint64_t{0}), "exceeds the limit");
  check_rejects(st_file(header, Bytes(8, 0), 0), "header is not a JSON object");
  check_rejects(st_file("[1, 2]", {}), "header is not a JSON object");
  check_rejects(st_file("\"text\"", {}), "header is not a JSON object");
  check_rejects(st_file("{\"t\": ", {}), "header is not valid JSON");
  check_rejects(st_file("{} trailing", {}), "header is not valid JSON");
  check_rejects(st_file("{\"\xff\": 1}", {}), "header is not valid JSON");  // not UTF-8
  check_rejects(st_file(R"({"t":[[[[[[[[1]]]]]]]]})", {}), "nests deeper");
  check_rejects(st_file(R"({"__metadata__":[1]})", {}), "__metadata__ is not an object");
  check_rejects(st_file(R"({"__metadata__":{"k":1}})", {}),
                "__metadata__ entry 'k' is not a string");
  CHECK(parse_bytes(st_file("{}", {})).tensors().empty());  // an empty file of tensors is valid
}

TEST_CASE("loaders: safetensors rejects bad tensor entries, naming the tensor") {
  check_rejects(one_tensor("3"), "tensor 't': entry is not an object");
  check_rejects(one_tensor(R"({"shape":[2],"data_offsets":[0,8]})"), "tensor 't': missing 'dtype'");
  check_rejects(one_tensor(R"({"dtype":"F32","data_offsets":[0,8]})"),
                "tensor 't': missing 'shape'");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[2]})"), "tensor 't': missing 'data_offsets'");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"),
                "unknown field 'x'");
  check_rejects(one_tensor(R"({"dtype":3,"shape":[2],"data_offsets":[0,8]})"),
                "dtype is not a string");
  check_rejects(one_tensor(R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})"),
                "unknown dtype 'F33'");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"),
                "shape is not an array");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
                "non-negative integers");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
                "non-negative integers");
  check_rejects(
      one_tensor(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]})", 4),
      "9 dims");
  check_rejects(
      one_tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
      "overflows");
  check_rejects(
      one_tensor(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]})"),
      "overflows");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"),
                "two non-negative integers");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,-8]})"),
                "two non-negative integers");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), "are reversed");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,16]})"),
                "run past the end of the data");
  check_rejects(
      one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]})"),
      "run past the end");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
                "needs 12 bytes");
  check_rejects(one_tensor(R"({"dtype":"F16","shape":[2],"data_offsets":[0,8]})"), "needs 4 bytes");
  check_rejects(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 12),
                "tensors cover 8 bytes");
}

TEST_CASE("loaders: safetensors rejects overlapping, gapped and shared tensor data") {
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  check_rejects(
      st_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", Bytes(12, 0)),
      "tensor 'b': data [4, 12) overlaps tensor 'a'");
  check_rejects(
      st_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Bytes(8, 0)),
      "overlaps tensor");
  check_rejects(st_file("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                        Bytes(16, 0)),
                "tensor 'b': data starts at 12 but the previous tensor ends at 8");
  // Out of order in the header is fine as long as the data tiles.
  const SafetensorsFile f = parse_bytes(st_file(
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)" + a + "}", Bytes(12, 0)));
  CHECK(f.tensor("b").offset == 8);
  // Empty tensors take no bytes and may sit anywhere in the tiling.
  CHECK(parse_bytes(st_file("{" + a + R"(,"e":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]}})",
                            Bytes(8, 0)))
            .tensor("e")
            .size_bytes == 0);
}

TEST_CASE("loaders: safetensors random corruption never crashes") {
  const Bytes good = small_file();
  const size_t header_end = static_cast<size_t>(parse_bytes(good).data_offset());
  const uint64_t seed = 20250101;
  std::mt19937_64 rng(seed);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % header_end;
      bytes[at] = (rng() % 2) ? static_cast<uint8_t>(rng())
                              : static_cast<uint8_t>(bytes[at] ^ (1u << (rng() % 8)));
    }
    try {
      const SafetensorsFile f = parse_bytes(bytes);
      for (const SafetensorsTensor& t : f.tensors())  // whatever parsed lies inside the buffer
        CHECK(f.data_offset() + t.offset + t.size_bytes <= bytes.size());
    } catch (const Error& e) {
      ++rejected;
      CHECK_MESSAGE(std::string(e.what()).rfind("[safetensors] ", 0) == 0,
                    "seed " << seed << ": " << e.what());
    }
  }
  MESSAGE("random corruption: " << rejected << " of 3000 rejected (seed " << seed << ")");
  CHECK(rejected > 1000);
}
