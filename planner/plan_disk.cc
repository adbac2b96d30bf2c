// PlanCache::save / load: the optional on-disk plan cache. Layout (little-endian int64 words):
//   magic, version, graph structure hash, backend hash, plan count,
//   per plan: pattern word count, pattern words;
//   then the xxHash64 of every preceding byte.
// Everything read is checked before use: counts against the file size, and each pattern is
// compiled again (compile_plan validates node ids, extents and liveness); any mismatch rejects
// the whole file.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "engine/error.h"
#include "planner/plan.h"
#include "xxhash.h"

namespace tessera {

namespace {

constexpr int64_t kMagic = 0x314e414c50535354;  // "TSSPLAN1"
constexpr int64_t kVersion = 1;

class Reader {
 public:
  explicit Reader(std::span<const int64_t> words) : words_(words) {}
  bool next(int64_t& out) {
    if (pos_ >= words_.size()) return false;
    out = words_[pos_++];
    return true;
  }
  size_t left() const { return words_.size() - pos_; }

 private:
  std::span<const int64_t> words_;
  size_t pos_ = 0;
};

}  // namespace

void PlanCache::save(const std::string& path, uint64_t graph_hash, std::string_view backend) const {
  std::vector<int64_t> w = {kMagic, kVersion, static_cast<int64_t>(graph_hash),
                            static_cast<int64_t>(XXH3_64bits(backend.data(), backend.size())),
                            static_cast<int64_t>(plans_.size())};
  for (const auto& [key, plan] : plans_) {
    w.push_back(static_cast<int64_t>(plan->pattern.words.size()));
    w.insert(w.end(), plan->pattern.words.begin(), plan->pattern.words.end());
  }
  w.push_back(static_cast<int64_t>(XXH64(w.data(), w.size() * sizeof(int64_t), 0)));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(int64_t)));
  if (!out) throw Error(absl::StrCat("[plan] cannot write plan cache '", path, "'"));
}

bool PlanCache::load(const std::string& path, const Graph& graph, uint64_t graph_hash, std::string_view backend) {
  auto reject = [&](std::string_view why) {
    std::fprintf(stderr, "[plan] warning: ignoring plan cache '%s': %.*s\n", path.c_str(), static_cast<int>(why.size()),
                 why.data());
    return false;
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return reject("cannot open");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(int64_t) != 0 || bytes.size() < 6 * sizeof(int64_t)) return reject("truncated");
  std::vector<int64_t> w(bytes.size() / sizeof(int64_t));
  std::memcpy(w.data(), bytes.data(), bytes.size());
  const uint64_t checksum = XXH64(w.data(), (w.size() - 1) * sizeof(int64_t), 0);
  if (static_cast<uint64_t>(w.back()) != checksum) return reject("checksum mismatch (corrupt or truncated)");
  Reader r(std::span<const int64_t>(w.data(), w.size() - 1));
  int64_t magic = 0, version = 0, ghash = 0, bhash = 0, count = 0;
  r.next(magic), r.next(version), r.next(ghash), r.next(bhash), r.next(count);
  if (magic != kMagic || version != kVersion) return reject("not a plan cache of this version");
  if (static_cast<uint64_t>(ghash) != graph_hash) return reject("made for another graph");
  if (static_cast<uint64_t>(bhash) != XXH3_64bits(backend.data(), backend.size())) return reject("made for another backend");
  if (count < 0 || static_cast<size_t>(count) > r.left()) return reject("bad plan count");
  std::vector<std::unique_ptr<Plan>> loaded;
  for (int64_t p = 0; p < count; ++p) {
    PlanPattern pattern;
    int64_t nwords = 0;
    if (!r.next(nwords) || nwords < 4 || static_cast<size_t>(nwords) > r.left()) return reject("bad pattern size");
    pattern.words.resize(static_cast<size_t>(nwords));
    for (int64_t& word : pattern.words) r.next(word);
    if (pattern.words[0] != ghash || pattern.words[1] != bhash) return reject("pattern of another graph");
    pattern.key = XXH3_64bits(pattern.words.data(), pattern.words.size() * sizeof(int64_t));
    std::unique_ptr<Plan> plan = compile_plan(graph, std::move(pattern));
    if (plan == nullptr) return reject("malformed pattern");
    loaded.push_back(std::move(plan));
  }
  if (r.left() != 0) return reject("trailing data");
  for (auto& plan : loaded) insert(std::move(plan));
  stats_.loaded += static_cast<int64_t>(loaded.size());
  return true;
}

}  // namespace tessera
