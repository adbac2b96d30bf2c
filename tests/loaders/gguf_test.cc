// GGUF parser: round trips through the in-test writer, and every validation rule on corrupt
// input (each raising tessera::Error "[gguf] ...", never crashing).
#include "loaders/gguf.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tests/loaders/gguf_test_writer.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// Parses a heap copy of exactly `bytes`, so any read past the end is a real overrun.
GgufFile parse_bytes(const std::vector<uint8_t>& bytes) {
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes);
  auto span = std::as_bytes(std::span<const uint8_t>(copy->data(), copy->size()));
  return GgufFile::parse(span, copy, "test.gguf");
}

// Asserts that parsing throws tessera::Error starting "[gguf] " and containing `needle`.
void check_rejects(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    parse_bytes(bytes);
    FAIL("parsed a corrupt file; expected an error containing: " << needle);
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.rfind("[gguf] ", 0) == 0, message);
    CHECK_MESSAGE(message.find(needle) != std::string::npos,
                  message << "  (wanted: " << needle << ")");
  }
}

std::vector<uint8_t> floats_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A small valid file with three tensors (f32 3x2, q8_0 2 rows of 32, f16 5).
GgufBuilder small_file() {
  GgufBuilder b;
  b.add_string("general.architecture", "test");
  b.add_scalar<uint32_t>("test.block_count", kU32, 2);
  b.add_tensor({"a", {3, 2}, 0, floats_bytes({1, 2, 3, 4, 5, 6})});
  std::vector<uint8_t> q8(2 * 34, 7);
  b.add_tensor({"b", {32, 2}, 8, q8});
  b.add_tensor({"c", {5}, 1, std::vector<uint8_t>(10, 0x3c)});
  return b;
}

std::string temp_path(const std::string& stem) {
  return "/tmp/tessera_gguf_test_" + std::to_string(::getpid()) + "_" + stem + ".gguf";
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

bool mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream content;
  content << maps.rdbuf();
  return content.str().find(path) != std::string::npos;
}

}  // namespace

TEST_CASE("loaders: gguf metadata of every value type round-trips") {
  GgufBuilder b;
  b.version = 2;
  b.add_scalar<uint8_t>("u8", kU8, 200);
  b.add_scalar<int8_t>("i8", kI8, -5);
  b.add_scalar<uint16_t>("u16", kU16, 60000);
  b.add_scalar<int16_t>("i16", kI16, -30000);
  b.add_scalar<uint32_t>("u32", kU32, 4000000000u);
  b.add_scalar<int32_t>("i32", kI32, -2000000000);
  b.add_scalar<uint64_t>("u64", kU64, 0xF123456789ABCDEFull);
  b.add_scalar<int64_t>("i64", kI64, -(int64_t{1} << 50));
  b.add_scalar<float>("f32", kF32, 1.5f);
  b.add_scalar<double>("f64", kF64, -2.25);
  b.add_scalar<uint8_t>("bool", kBool, 1);
  b.add_string("string", "h\xc3\xa9llo");
  b.add_string("empty_string", "");
  b.add_array<uint8_t>("a_u8", kU8, {1, 2, 255});
  b.add_array<int8_t>("a_i8", kI8, {-128, 0, 127});
  b.add_array<uint16_t>("a_u16", kU16, {65535, 1});
  b.add_array<int16_t>("a_i16", kI16, {-32768, 32767});
  b.add_array<uint32_t>("a_u32", kU32, {7, 4294967295u});
  b.add_array<int32_t>("a_i32", kI32, {-1, 7, 0});
  b.add_array<uint64_t>("a_u64", kU64, {~uint64_t{0}});
  b.add_array<int64_t>("a_i64", kI64, {-3, int64_t{1} << 62});
  b.add_array<float>("a_f32", kF32, {0.5f, -1.0f});
  b.add_array<double>("a_f64", kF64, {1e300, -0.125});
  b.add_array<uint8_t>("a_bool", kBool, {1, 0, 1});
  b.add_array<int32_t>("a_empty", kI32, {});
  b.add("a_string", [](ByteWriter& w) {
    w.put<uint32_t>(kArray);
    w.put<uint32_t>(kString);
    w.put<uint64_t>(3);
    w.put_string("a");
    w.put_string("");
    w.put_string("ccc");
  });
  b.add("a_nested", [](ByteWriter& w) {  // [[1, 2], [3]] of i32, then [["x"]]
    w.put<uint32_t>(kArray);
    w.put<uint32_t>(kArray);
    w.put<uint64_t>(3);
    w.put<uint32_t>(kI32);
    w.put<uint64_t>(2);
    w.put<int32_t>(1);
    w.put<int32_t>(2);
    w.put<uint32_t>(kI32);
    w.put<uint64_t>(1);
    w.put<int32_t>(3);
    w.put<uint32_t>(kString);
    w.put<uint64_t>(1);
    w.put_string("x");
  });
  const GgufFile f = parse_bytes(b.build());

  CHECK(f.version() == 2);
  CHECK(f.tensors().empty());
  CHECK(f.alignment() == 32);
  CHECK(f.get_u8("u8") == 200);
  CHECK(f.get_i8("i8") == -5);
  CHECK(f.get_u16("u16") == 60000);
  CHECK(f.get_i16("i16") == -30000);
  CHECK(f.get_u32("u32") == 4000000000u);
  CHECK(f.get_i32("i32") == -2000000000);
  CHECK(f.get_u64("u64") == 0xF123456789ABCDEFull);
  CHECK(f.get_i64("i64") == -(int64_t{1} << 50));
  CHECK(f.get_f32("f32") == 1.5f);
  CHECK(f.get_f64("f64") == -2.25);
  CHECK(f.get_bool("bool"));
  CHECK(f.get_string("string") == "h\xc3\xa9llo");
  CHECK(f.get_string("empty_string").empty());
  CHECK(f.get_integer("u32") == 4000000000);
  CHECK(f.get_integer("i8") == -5);
  CHECK(f.get_array<uint8_t>("a_u8") == std::vector<uint8_t>{1, 2, 255});
  CHECK(f.get_array<int8_t>("a_i8") == std::vector<int8_t>{-128, 0, 127});
  CHECK(f.get_array<uint16_t>("a_u16") == std::vector<uint16_t>{65535, 1});
  CHECK(f.get_array<int16_t>("a_i16") == std::vector<int16_t>{-32768, 32767});
  CHECK(f.get_u32_array("a_u32") == std::vector<uint32_t>{7, 4294967295u});
  CHECK(f.get_i32_array("a_i32") == std::vector<int32_t>{-1, 7, 0});
  CHECK(f.get_array<uint64_t>("a_u64") == std::vector<uint64_t>{~uint64_t{0}});
  CHECK(f.get_i64_array("a_i64") == std::vector<int64_t>{-3, int64_t{1} << 62});
  CHECK(f.get_f32_array("a_f32") == std::vector<float>{0.5f, -1.0f});
  CHECK(f.get_array<double>("a_f64") == std::vector<double>{1e300, -0.125});
  CHECK(f.get_array<bool>("a_bool") == std::vector<bool>{true, false, true});
  CHECK(f.get_i32_array("a_empty").empty());
  CHECK(f.get_string_array("a_string") == std::vector<std::string_view>{"a", "", "ccc"});
  CHECK(f.get("a_string").element(2).as_string() == "ccc");
  CHECK(f.get("a_i32").element(1).as_i32() == 7);
  CHECK(f.get("a_i32").size() == 3);
  CHECK(f.get("a_i32").element_type() == GgufValueType::I32);

  const auto& nested = f.get("a_nested").arrays();
  REQUIRE(nested.size() == 3);
  CHECK(nested[0].to_vector<int32_t>() == std::vector<int32_t>{1, 2});
  CHECK(nested[1].to_vector<int32_t>() == std::vector<int32_t>{3});
  CHECK(nested[2].strings() == std::vector<std::string_view>{"x"});

  // Iteration sees every key once, in file order.
  REQUIRE(f.metadata().size() == 27);
  CHECK(f.metadata()[0].key == "u8");
  CHECK(f.metadata()[26].key == "a_nested");
  for (const GgufKeyValue& kv : f.metadata()) CHECK(f.find(kv.key) == &kv.value);
}

TEST_CASE("loaders: gguf typed getters report missing keys and wrong types") {
  GgufBuilder b;
  b.add_scalar<float>("f32", kF32, 1.0f);
  b.add_scalar<uint64_t>("big", kU64, ~uint64_t{0});
  b.add_array<int32_t>("ints", kI32, {1, 2});
  const GgufFile f = parse_bytes(b.build());
  CHECK_FALSE(f.has("nope"));
  CHECK(f.find("nope") == nullptr);
  CHECK_THROWS_WITH_AS(f.get_u32("nope"), "[gguf] test.gguf: missing metadata key 'nope'", Error);
  CHECK_THROWS_WITH_AS(f.get_u32("f32"), "[gguf] key 'f32': expected u32, found f32", Error);
  CHECK_THROWS_WITH_AS(f.get_string("f32"), "[gguf] key 'f32': expected string, found f32", Error);
  CHECK_THROWS_WITH_AS(f.get_integer("f32"), "[gguf] key 'f32': expected an integer, found f32",
                       Error);
  CHECK_THROWS_WITH_AS(f.get_integer("big"), doctest::Contains("does not fit in int64"), Error);
  CHECK_THROWS_WITH_AS(f.get_f32_array("ints"),
                       "[gguf] key 'ints': expected array of f32, found array of i32", Error);
  CHECK_THROWS_WITH_AS(f.get_string_array("f32"),
                       "[gguf] key 'f32': expected array of string, found f32", Error);
  CHECK_THROWS_WITH_AS(f.get("ints").element(2), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(f.get("f32").size(), doctest::Contains("expected array"), Error);
  CHECK_THROWS_WITH_AS(f.tensor("w"), "[gguf] test.gguf: no tensor named 'w'", Error);
}

TEST_CASE("loaders: gguf tensor table, alignment and data pointers") {
  for (uint64_t alignment : {uint64_t{32}, uint64_t{64}, uint64_t{8}}) {
    CAPTURE(alignment);
    GgufBuilder b = small_file();
    b.alignment = alignment;
    b.write_alignment = alignment != 32;
    const std::vector<uint8_t> bytes = b.build();
    const GgufFile f = parse_bytes(bytes);
    CHECK(f.alignment() == alignment);
    CHECK(f.data_offset() == b.at["data"]);
    CHECK(f.data_offset() % alignment == 0);
    REQUIRE(f.tensors().size() == 3);
    const GgufTensor& a = f.tensor("a");
    CHECK(a.dims == Shape{3, 2});
    CHECK(a.shape() == Shape{2, 3});
    CHECK(a.type == GgmlType::F32);
    CHECK(a.element_count == 6);
    CHECK(a.size_bytes == 24);
    CHECK(a.row_length() == 3);
    CHECK(a.row_count() == 2);
    CHECK(a.row_bytes() == 12);
    float values[6];
    std::memcpy(values, a.data, 24);
    CHECK(values[5] == 6.0f);
    const GgufTensor& q = f.tensor("b");
    CHECK(q.type == GgmlType::Q8_0);
    CHECK(q.size_bytes == 68);
    CHECK(q.row_bytes() == 34);
    CHECK(q.offset % alignment == 0);
    CHECK(static_cast<uint8_t>(q.data[67]) == 7);
    const GgufTensor& c = f.tensor("c");
    CHECK(c.type == GgmlType::F16);
    CHECK(c.size_bytes == 10);
    CHECK(c.data - a.data == static_cast<std::ptrdiff_t>(c.offset - a.offset));
    CHECK(f.data_offset() + c.offset + c.size_bytes == f.file_size());  // c is last
    for (const GgufTensor& t : f.tensors()) CHECK(f.find_tensor(t.name) == &t);
  }
}

TEST_CASE("loaders: gguf open maps the file and unmaps when the last owner goes") {
  const std::string path = temp_path("map");
  write_file(path, small_file().build());
  std::shared_ptr<const void> owner;
  const std::byte* data = nullptr;
  {
    const GgufFile f = GgufFile::open(path);
    CHECK(f.name() == path);
    CHECK(f.version() == 3);
    CHECK(mapped(path));
    owner = f.owner();
    data = f.tensor("a").data;
  }
  float first;
  std::memcpy(&first, data, 4);  // still mapped through `owner`
  CHECK(first == 1.0f);
  CHECK(mapped(path));
  owner.reset();
  CHECK_FALSE(mapped(path));

  // Truncated files on disk fail cleanly too.
  const std::vector<uint8_t> bytes = small_file().build();
  for (size_t cut : {size_t{0}, size_t{3}, size_t{10}, bytes.size() / 2, bytes.size() - 1}) {
    write_file(path, std::vector<uint8_t>(bytes.begin(),
                                          bytes.begin() + static_cast<std::ptrdiff_t>(cut)));
    const std::string prefix = "[gguf] " + path;
    CHECK_THROWS_WITH_AS(GgufFile::open(path), doctest::Contains(prefix.c_str()), Error);
  }
  std::remove(path.c_str());
  CHECK_THROWS_WITH_AS(GgufFile::open(path), doctest::Contains("cannot open"), Error);
  CHECK_THROWS_WITH_AS(GgufFile::open("/tmp"), doctest::Contains("not a regular file"), Error);
}

TEST_CASE("loaders: gguf truncated at every offset is rejected") {
  GgufBuilder b = small_file();
  b.add_array<int32_t>("ints", kI32, {1, 2, 3});
  b.add("strings", [](ByteWriter& w) {
    w.put<uint32_t>(kArray);
    w.put<uint32_t>(kString);
    w.put<uint64_t>(2);
    w.put_string("hello");
    w.put_string("world");
  });
  const std::vector<uint8_t> bytes = b.build();
  parse_bytes(bytes);  // the whole file is fine
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    CAPTURE(cut);
    CHECK_THROWS_WITH_AS(parse_bytes(std::vector<uint8_t>(
                             bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut))),
                         doctest::Contains("[gguf] test.gguf: "), Error);
  }
}

TEST_CASE("loaders: gguf rejects bad magic, versions and counts") {
  const GgufBuilder base = small_file();
  GgufBuilder b = base;
  std::vector<uint8_t> good = b.build();
  std::vector<uint8_t> bytes;

  bytes = good;
  bytes[0] = 'X';
  check_rejects(bytes, "not a GGUF file");
  for (uint32_t version : {0u, 1u, 4u, 0xFFFFFFFFu}) {
    bytes = good;
    poke<uint32_t>(bytes, b.at["version"], version);
    check_rejects(bytes, "unsupported GGUF version");
  }
  bytes = good;
  poke<uint32_t>(bytes, b.at["version"], 0x03000000u);
  check_rejects(bytes, "big-endian");
  for (uint64_t count : {uint64_t{1} << 40, ~uint64_t{0}, uint64_t(good.size())}) {
    bytes = good;
    poke<uint64_t>(bytes, b.at["tensor_count"], count);
    check_rejects(bytes, "tensor count");
    bytes = good;
    poke<uint64_t>(bytes, b.at["kv_count"], count);
    check_rejects(bytes, "metadata count");
  }
  // One more key than written: the tensor table is then read as metadata and fails somewhere.
  bytes = good;
  poke<uint64_t>(bytes, b.at["kv_count"], 3);
  check_rejects(bytes, "");
}

TEST_CASE("loaders: gguf rejects bad strings, value types and arrays") {
  GgufBuilder b = small_file();
  b.add_array<int32_t>("ints", kI32, {1, 2, 3});
  const std::vector<uint8_t> good = b.build();
  const size_t arch = b.at["kv:general.architecture"];  // key length, key, type, value
  const size_t arch_value = arch + 8 + 20 + 4;          // value string length
  const size_t ints = b.at["kv:ints"] + 8 + 4 + 4;      // array element type
  std::vector<uint8_t> bytes;

  for (uint64_t length : {~uint64_t{0}, uint64_t{1} << 62, uint64_t(good.size())}) {
    bytes = good;
    poke<uint64_t>(bytes, arch, length);
    check_rejects(bytes, "exceeds");
    bytes = good;
    poke<uint64_t>(bytes, arch_value, length);
    check_rejects(bytes, "exceeds");
  }
  bytes = good;
  poke<uint32_t>(bytes, arch + 8 + 20, 13);
  check_rejects(bytes, "unknown value type 13");
  bytes = good;
  poke<uint32_t>(bytes, ints, 0xFFFFFFFF);
  check_rejects(bytes, "unknown value type 4294967295 for element type of array 'ints'");
  for (uint64_t count : {~uint64_t{0}, uint64_t{1} << 61, uint64_t{1000}}) {
    bytes = good;
    poke<uint64_t>(bytes, ints + 4, count);
    check_rejects(bytes, "array 'ints'");
  }
  bytes = good;
  poke<uint32_t>(bytes, ints, kString);  // three i32 read as strings: lengths run off the end
  check_rejects(bytes, "");

  // Duplicate key.
  GgufBuilder dup = small_file();
  dup.add_scalar<uint32_t>("test.block_count", kU32, 3);
  check_rejects(dup.build(), "duplicate metadata key 'test.block_count'");

  // Arrays nested past the depth limit, with plenty of bytes.
  GgufBuilder deep;
  deep.add("deep", [](ByteWriter& w) {
    w.put<uint32_t>(kArray);
    for (int i = 0; i < 40; ++i) {
      w.put<uint32_t>(kArray);
      w.put<uint64_t>(1);
    }
    w.put<uint32_t>(kI32);
    w.put<uint64_t>(0);
  });
  check_rejects(deep.build(), "nest deeper than");
}

TEST_CASE("loaders: gguf rejects bad alignment metadata") {
  for (uint32_t alignment : {0u, 3u, 48u}) {
    GgufBuilder b = small_file();
    b.add_scalar<uint32_t>("general.alignment", kU32, alignment);
    check_rejects(b.build(), "is not a power of two");
  }
  GgufBuilder b = small_file();
  b.add_scalar<uint64_t>("general.alignment", kU64, 32);
  check_rejects(b.build(), "general.alignment must be u32, found u64");
}

TEST_CASE("loaders: gguf rejects bad tensor infos") {
  GgufBuilder b = small_file();
  const std::vector<uint8_t> good = b.build();
  const size_t b_info = b.at["tensor:b"];  // name length, name "b", n_dims, dims...
  const size_t b_ndims = b_info + 8 + 1;
  const size_t b_type = b.at["tensor:b:type"];
  const size_t b_offset = b.at["tensor:b:offset"];
  std::vector<uint8_t> bytes;

  for (uint32_t type : {4u, 5u, 31u, 36u, 1000u, 0xFFFFFFFFu}) {
    bytes = good;
    poke<uint32_t>(bytes, b_type, type);
    check_rejects(bytes, "tensor 'b' has unknown ggml type " + std::to_string(type));
  }
  bytes = good;
  poke<uint32_t>(bytes, b_ndims, 5);
  check_rejects(bytes, "tensor 'b' has 5 dims");
  bytes = good;
  poke<uint64_t>(bytes, b_ndims + 4, uint64_t{1} << 40);
  poke<uint64_t>(bytes, b_ndims + 12, uint64_t{1} << 40);
  check_rejects(bytes, "element count overflows");
  bytes = good;
  poke<uint64_t>(bytes, b_ndims + 4, ~uint64_t{0});
  check_rejects(bytes, "element count overflows");
  bytes = good;
  poke<uint64_t>(bytes, b_ndims + 4, 31);  // q8_0 row of 31 elements
  check_rejects(bytes, "not a multiple of the q8_0 block size 32");
  bytes = good;
  poke<uint64_t>(bytes, b_ndims + 12, 1000);  // 1000 rows: past the end of the data
  check_rejects(bytes, "run past the end of the data section");
  bytes = good;
  poke<uint64_t>(bytes, b_offset, 16);
  check_rejects(bytes, "offset 16 is not a multiple of the alignment 32");
  for (uint64_t offset : {uint64_t{4096}, ~uint64_t{0} - 31, uint64_t{1} << 63}) {
    bytes = good;
    poke<uint64_t>(bytes, b_offset, offset);
    check_rejects(bytes, "run past the end of the data section");
  }
  // Tensor `c` (f16, last) relabelled f32 now needs twice its bytes.
  bytes = good;
  poke<uint32_t>(bytes, b.at["tensor:c:type"], 0);
  check_rejects(bytes, "tensor 'c'");

  GgufBuilder dup = small_file();
  dup.add_tensor({"a", {1}, 0, floats_bytes({0})});
  check_rejects(dup.build(), "duplicate tensor name 'a'");
}

TEST_CASE("loaders: gguf random corruption never crashes") {
  GgufBuilder b = small_file();
  b.add_array<float>("floats", kF32, {1, 2, 3});
  b.add("strings", [](ByteWriter& w) {
    w.put<uint32_t>(kArray);
    w.put<uint32_t>(kString);
    w.put<uint64_t>(2);
    w.put_string("hello");
    w.put_string("world");
  });
  const std::vector<uint8_t> good = b.build();
  const size_t header_end = b.at["data"];
  const uint64_t seed = 20240611;
  std::mt19937_64 rng(seed);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % header_end;
      bytes[at] = (rng() % 2) ? static_cast<uint8_t>(rng())
                              : static_cast<uint8_t>(bytes[at] ^ (1u << (rng() % 8)));
    }
    try {
      const GgufFile f = parse_bytes(bytes);
      for (const GgufTensor& t : f.tensors()) {  // whatever parsed must lie inside the buffer
        CHECK(t.offset + t.size_bytes <= f.file_size() - f.data_offset());
      }
    } catch (const Error& e) {
      ++rejected;
      CHECK_MESSAGE(std::string(e.what()).rfind("[gguf] ", 0) == 0,
                    "seed " << seed << ": " << e.what());
    }
  }
  MESSAGE("random corruption: " << rejected << " of 3000 rejected (seed " << seed << ")");
  CHECK(rejected > 1000);
}
