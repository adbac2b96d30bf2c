#include "planner/cse.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "xxhash.h"

namespace tessera {

std::vector<NodeId> merge_common(const Graph& graph, std::span<const uint8_t> fixed,
                                 absl::FunctionRef<std::span<const std::byte>(NodeId)> content) {
  std::vector<NodeId> rep(static_cast<size_t>(graph.size()));
  absl::flat_hash_map<uint64_t, absl::InlinedVector<NodeId, 1>> seen;
  for (NodeId id = 0; id < graph.size(); ++id) {
    rep[static_cast<size_t>(id)] = id;
    const Node& node = graph.node(id);
    if (node.kind == OpKind::Input) continue;
    if (fixed[static_cast<size_t>(id)]) {
      std::span<const std::byte> bytes = content(id);
      Node key;
      key.kind = OpKind::Constant;
      key.dtype = node.dtype;
      key.shape = node.shape;
      const uint64_t h = node_hash(key, XXH3_64bits(bytes.data(), bytes.size()));
      auto& bucket = seen[h];
      for (NodeId other : bucket) {
        const Node& o = graph.node(other);
        std::span<const std::byte> other_bytes = content(other);
        if (o.dtype == node.dtype && o.shape == node.shape && other_bytes.size() == bytes.size() &&
            std::memcmp(other_bytes.data(), bytes.data(), bytes.size()) == 0) {
          rep[static_cast<size_t>(id)] = other;
          break;
        }
      }
      if (rep[static_cast<size_t>(id)] == id) bucket.push_back(id);
      continue;
    }
    bool remapped = false;
    Node key = node;
    for (NodeId& in : key.inputs) {
      remapped = remapped || rep[static_cast<size_t>(in)] != in;
      in = rep[static_cast<size_t>(in)];
    }
    auto& bucket = seen[node_hash(key, 0) ^ 0x9e3779b97f4a7c15ull];
    // Without a remapped input, hash-consing already made this node unique.
    if (!remapped) {
      bucket.push_back(id);
      continue;
    }
    for (NodeId other : bucket) {
      const Node& o = graph.node(other);
      bool same = o.kind == key.kind && o.dtype == key.dtype && o.shape == key.shape && o.attrs == key.attrs &&
                  o.inputs.size() == key.inputs.size();
      for (size_t k = 0; same && k < key.inputs.size(); ++k) same = rep[static_cast<size_t>(o.inputs[k])] == key.inputs[k];
      if (same) {
        rep[static_cast<size_t>(id)] = other;
        break;
      }
    }
    if (rep[static_cast<size_t>(id)] == id) bucket.push_back(id);
  }
  return rep;
}

}  // namespace tessera
