// The built-in host backends: "cpu" (optimised kernels where registered, reference otherwise)
// and "reference" (the scalar oracle only).
#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "backends/cpu/host_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ref/ref_kernels.h"

namespace tessera {

namespace {

class CpuBackend final : public HostBackend {
 public:
  explicit CpuBackend(bool optimised) : optimised_(optimised) {
    // The kernels' instruction set (TESSERA_CPU_ISA caps it), for logs and list_backends.
    if (optimised_) description_ = absl::StrCat("cpu (", cpu::isa_name(cpu::detected_isa()), ")");
  }
  std::string_view name() const override { return optimised_ ? "cpu" : "reference"; }

 protected:
  KernelFn kernel_for(const Graph& graph, const Node& node) const override {
    if (optimised_)
      if (KernelFn fast = cpu::optimised_kernel(graph, node)) return fast;
    return ref::reference_kernel(node.kind);
  }
  bool repacks_weight(const Graph& graph, const Node& consumer) const override {
    return prepared_size(graph, consumer, kernel_for(graph, consumer)) > 0;
  }
  int64_t prepared_size(const Graph& graph, const Node& node, KernelFn kernel) const override {
    return optimised_ ? cpu::prepared_bytes(graph, node, kernel) : 0;
  }
  GroupKernelFn group_kernel_for(KernelFn kernel) const override {
    return optimised_ ? cpu::group_kernel(kernel) : nullptr;
  }
  AttentionPhases attention_phases_for(const Graph& graph, const Node& node, KernelFn kernel) const override {
    return optimised_ ? cpu::attention_phases(graph, node, kernel) : AttentionPhases{};
  }
  // Made once per weight (its address and shape) and kernel and shared by every plan and
  // session on this backend (the pool's: so by the pool's sessions) and by every other cpu
  // backend of the process that asks for it while one holds it (a pool's 1- and 2-thread
  // backends, pools over one mapped model).
  // An entry is reused only while the weight's owner is alive (its address cannot have been
  // reused); a weight without an owner is prepared per plan.
  const void* prepare_node(const Graph& graph, const Node& node, KernelFn kernel) override {
    const int64_t bytes = prepared_size(graph, node, kernel);
    if (bytes == 0) return nullptr;
    const Node& weight_node = graph.node(node.inputs[1]);
    const ConstantData& weight = graph.constant_data(weight_node.constant);
    // The shape too: two constants may view the same bytes as different matrices.
    const Key key{reinterpret_cast<uintptr_t>(weight.data), reinterpret_cast<uintptr_t>(kernel), weight_node.shape[0],
                  weight_node.shape[1]};
    if (weight.owner != nullptr) {
      auto it = prepared_.find(key);
      if (it != prepared_.end() && it->second.owner.lock() == weight.owner) return it->second.data.get();
      if (std::shared_ptr<const void> data = shared_prepared().find(key, weight.owner)) {
        const void* result = data.get();
        prepared_[key] = Prepared{weight.owner, std::move(data)};
        return result;
      }
    }
    std::shared_ptr<const void> data = cpu::prepare_node_data(graph, node, kernel);
    if (data == nullptr) return nullptr;
    stats_.prepared_bytes += bytes;
    const void* result = data.get();
    if (weight.owner != nullptr) {
      shared_prepared().add(key, weight.owner, data);
      prepared_[key] = Prepared{weight.owner, std::move(data)};
    } else {
      unshared_.push_back(std::move(data));
    }
    return result;
  }

 private:
  using Key = std::tuple<uintptr_t, uintptr_t, int64_t, int64_t>;  // the weight's address, the kernel, its shape
  struct Prepared {
    std::weak_ptr<const void> owner;
    std::shared_ptr<const void> data;
  };
  // The process's prepared data, held weakly: it lives while a backend holds it.
  class SharedPrepared {
   public:
    std::shared_ptr<const void> find(const Key& key, const std::shared_ptr<const void>& owner) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it == entries_.end() || it->second.owner.lock() != owner) return nullptr;
      return it->second.data.lock();
    }
    void add(const Key& key, const std::shared_ptr<const void>& owner, const std::shared_ptr<const void>& data) {
      std::lock_guard<std::mutex> lock(mutex_);
      absl::erase_if(entries_, [](const auto& entry) { return entry.second.data.expired(); });
      entries_[key] = Entry{owner, data};
    }

   private:
    struct Entry {
      std::weak_ptr<const void> owner, data;
    };
    std::mutex mutex_;
    absl::flat_hash_map<Key, Entry> entries_;
  };
  static SharedPrepared& shared_prepared() {
    static SharedPrepared* shared = new SharedPrepared;  // never destroyed: backends may outlive statics
    return *shared;
  }
  bool optimised_;
  absl::flat_hash_map<Key, Prepared> prepared_;
  std::vector<std::shared_ptr<const void>> unshared_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>(true);
}
std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<CpuBackend>(false);
}

}  // namespace tessera
