// A tiny GGUF writer for tests: builds files byte by byte and records where each field landed,
// so that tests can corrupt exactly the field they mean to.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::testing {

// Little-endian byte sink.
class ByteWriter {
 public:
  std::vector<uint8_t> bytes;

  size_t size() const { return bytes.size(); }
  template <typename T>
  void put(T value) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
  }
  void put_raw(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + n);
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    put_raw(s.data(), s.size());
  }
};

// GGUF value type ids (mirrors GgufValueType, spelled out independently).
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

struct TestTensor {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order
  uint32_t type = 0;           // ggml type id
  std::vector<uint8_t> data;   // exact bytes
};

class GgufBuilder {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // layout alignment; written as general.alignment when write_alignment
  bool write_alignment = false;

  // Adds a key whose value body (type id + payload) is written by `body`.
  template <typename Body>
  void add(std::string key, Body body) {
    ByteWriter w;
    w.put_string(key);
    body(w);
    kvs_.push_back({std::move(key), std::move(w.bytes)});
  }
  template <typename T>
  void add_scalar(std::string key, uint32_t type, T value) {
    add(std::move(key), [&](ByteWriter& w) {
      w.put<uint32_t>(type);
      w.put<T>(value);
    });
  }
  void add_string(std::string key, std::string_view value) {
    add(std::move(key), [&](ByteWriter& w) {
      w.put<uint32_t>(kString);
      w.put_string(value);
    });
  }
  template <typename T>
  void add_array(std::string key, uint32_t element_type, const std::vector<T>& values) {
    add(std::move(key), [&](ByteWriter& w) {
      w.put<uint32_t>(kArray);
      w.put<uint32_t>(element_type);
      w.put<uint64_t>(values.size());
      for (const T& v : values) w.put<T>(v);
    });
  }
  void add_tensor(TestTensor tensor) { tensors_.push_back(std::move(tensor)); }

  // Serialises the file; `at` then maps field names ("tensor_count", "kv:<key>",
  // "tensor:<name>:type", "tensor:<name>:offset", "data") to their byte offsets.
  std::vector<uint8_t> build() {
    at.clear();
    ByteWriter w;
    w.put_raw("GGUF", 4);
    at["version"] = w.size();
    w.put<uint32_t>(version);
    at["tensor_count"] = w.size();
    w.put<uint64_t>(tensors_.size());
    at["kv_count"] = w.size();
    w.put<uint64_t>(kvs_.size() + (write_alignment ? 1 : 0));
    if (write_alignment) {
      at["kv:general.alignment"] = w.size();
      w.put_string("general.alignment");
      w.put<uint32_t>(kU32);
      w.put<uint32_t>(static_cast<uint32_t>(alignment));
    }
    for (const auto& [key, bytes] : kvs_) {
      at["kv:" + key] = w.size();
      w.put_raw(bytes.data(), bytes.size());
    }
    std::vector<uint64_t> offsets;
    uint64_t data_size = 0;
    for (const TestTensor& t : tensors_) {
      data_size = align(data_size);
      offsets.push_back(data_size);
      data_size += t.data.size();
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TestTensor& t = tensors_[i];
      at["tensor:" + t.name] = w.size();
      w.put_string(t.name);
      w.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) w.put<uint64_t>(d);
      at["tensor:" + t.name + ":type"] = w.size();
      w.put<uint32_t>(t.type);
      at["tensor:" + t.name + ":offset"] = w.size();
      w.put<uint64_t>(offsets[i]);
    }
    if (!tensors_.empty()) {
      while (w.size() % alignment != 0) w.put<uint8_t>(0);
    }
    at["data"] = w.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      while (w.size() - at["data"] < offsets[i]) w.put<uint8_t>(0);
      w.put_raw(tensors_[i].data.data(), tensors_[i].data.size());
    }
    return std::move(w.bytes);
  }

  std::map<std::string, size_t> at;

 private:
  uint64_t align(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }

  std::vector<std::pair<std::string, std::vector<uint8_t>>> kvs_;
  std::vector<TestTensor> tensors_;
};

// Overwrites sizeof(T) bytes at `offset`.
template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

}  // namespace tessera::testing
