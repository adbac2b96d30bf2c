// The backend seam: the registry (built-ins, plugins on TESSERA_BACKEND_PATH, broken plugins
// reported), the Backend interface over host memory, and sessions on a plugin backend.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "backends/cpu/host_backend.h"
#include "backends/registry.h"
#include "engine/ops.h"
#include "engine/session.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/support/quant_blocks.h"

using namespace tessera;

namespace {

const std::string kPluginDir = TESSERA_PLUGIN_DIR;

// Sets an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// A fresh temporary directory, removed at the end of the scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("tessera_backend_test_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// softmax(tanh(x @ w) * x2 + b) over rows: matmul, elementwise (fused), softmax.
struct SmallModel {
  Graph g;
  SmallModel() {
    Tensor x = g.input("x", {6, 8}, DType::F32);
    Tensor w = g.input("w", {8, 5}, DType::F32);
    Tensor b = g.input("b", {6, 5}, DType::F32);
    Tensor y = softmax(tanh(matmul(x, w)) * b + b, -1);
    g.output("y", y);
  }
  std::vector<float> run(SessionOptions options) {
    GraphSession s(g, options);
    s.write("x", Box{{0, 6}, {0, 8}}, random_values(48, 1));
    s.write("w", Box{{0, 8}, {0, 5}}, random_values(40, 2));
    s.write("b", Box{{0, 6}, {0, 5}}, random_values(30, 3));
    s.read<float>("y", Box{{0, 6}, {0, 5}});
    // An incremental step: one row of x changes, the read recomputes that row.
    s.write("x", Box{{4, 5}, {0, 8}}, random_values(8, 4));
    return s.read<float>("y", Box{{0, 6}, {0, 5}});
  }
};

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("backends: the registry creates the built-in backends by name") {
  BackendRegistry registry(std::vector<std::string>{});
  for (const char* name : {"cpu", "reference"}) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = registry.create(name);
    REQUIRE(backend.ok());
    CHECK((*backend)->name() == name);
    CHECK((*backend)->host_addressable());
  }
  absl::StatusOr<std::unique_ptr<Backend>> bad = registry.create("../etc");
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("backends: a missing plugin and missing directories are reported with what was tried") {
  BackendRegistry registry(
      std::vector<std::string>{"/nonexistent/tessera/a", "/nonexistent/tessera/b"});
  absl::StatusOr<std::unique_ptr<Backend>> backend = registry.create("cuda");
  REQUIRE_FALSE(backend.ok());
  CHECK(backend.status().code() == absl::StatusCode::kNotFound);
  const std::string message(backend.status().message());
  CHECK(message.find("no backend 'cuda'") != std::string::npos);
  CHECK(message.find("/nonexistent/tessera/a/libtessera_backend_cuda.so (no such file)") !=
        std::string::npos);
  CHECK(message.find("/nonexistent/tessera/b/libtessera_backend_cuda.so") != std::string::npos);

  // Through a session: an Error, not a crash.
  ScopedEnv env("TESSERA_BACKEND_PATH", "/nonexistent/tessera/a:");
  SmallModel m;
  SessionOptions options;
  options.backend_name = "cuda";
  CHECK_THROWS_WITH_AS(GraphSession(m.g, options), doctest::Contains("libtessera_backend_cuda.so"),
                       Error);
}

TEST_CASE("backends: bogus plugin files are reported, not fatal") {
  TempDir dir;
  // An empty file and a text file named like plugins: dlopen rejects both.
  std::ofstream(dir.path / "libtessera_backend_empty.so").close();
  std::ofstream(dir.path / "libtessera_backend_bogus.so") << "not a shared library\n";
  // Real libraries: one without the entry point, one of another ABI version.
  std::filesystem::copy_file(kPluginDir + "/libtessera_backend_nosymbol.so",
                             dir.path / "libtessera_backend_nosymbol.so");
  std::filesystem::copy_file(kPluginDir + "/libtessera_backend_oldabi.so",
                             dir.path / "libtessera_backend_oldabi.so");
  // The real test plugin under another file name: the descriptor's name must match.
  std::filesystem::copy_file(kPluginDir + "/libtessera_backend_test.so",
                             dir.path / "libtessera_backend_renamed.so");
  BackendRegistry registry(std::vector<std::string>{dir.path.string()});
  struct Case {
    const char* name;
    std::string why;
  };
  for (const Case& c : {Case{"empty", "dlopen failed"}, Case{"bogus", "dlopen failed"},
                        Case{"nosymbol", "no entry point 'tessera_backend_plugin'"},
                        Case{"oldabi", "plugin ABI version 57005, this build needs " + std::to_string(TESSERA_BACKEND_ABI_VERSION)},
                        Case{"renamed", "the library is backend 'test', not 'renamed'"}}) {
    CAPTURE(c.name);
    absl::StatusOr<std::unique_ptr<Backend>> backend = registry.create(c.name);
    REQUIRE_FALSE(backend.ok());
    CHECK(backend.status().code() == absl::StatusCode::kNotFound);
    CHECK(std::string(backend.status().message()).find(c.why) != std::string::npos);
  }
  absl::StatusOr<std::unique_ptr<Backend>> direct =
      BackendRegistry::create_from_file((dir.path / "libtessera_backend_bogus.so").string());
  CHECK_FALSE(direct.ok());
  // available() lists files without loading them.
  std::vector<std::string> names = registry.available();
  CHECK(std::find(names.begin(), names.end(), "bogus") != names.end());
}

TEST_CASE(
    "backends: the test plugin loads through TESSERA_BACKEND_PATH and matches the reference "
    "bitwise") {
  ScopedEnv env("TESSERA_BACKEND_PATH", "/nonexistent/first:" + kPluginDir);
  absl::StatusOr<std::unique_ptr<Backend>> backend = BackendRegistry().create("test");
  REQUIRE_MESSAGE(backend.ok(), backend.status().message());
  CHECK((*backend)->name() == "test");

  for (bool fuse : {false, true}) {
    CAPTURE(fuse);
    SmallModel m;
    SessionOptions reference;
    reference.backend = BackendKind::Reference;
    reference.fuse = fuse;
    SessionOptions plugin;
    plugin.backend_name = "test";
    plugin.fuse = fuse;
    const std::vector<float> want = m.run(reference);
    const std::vector<float> got = m.run(plugin);
    CHECK(bitwise_equal(want, got));
  }
  SmallModel m;
  SessionOptions options;
  options.backend_name = "test";
  GraphSession s(m.g, options);
  CHECK(s.backend_name() == "test");
}

TEST_CASE(
    "backends: an op the plugin does not support is a clear Error, and the session stays usable") {
  ScopedEnv env("TESSERA_BACKEND_PATH", kPluginDir);
  Graph g;
  Tensor x = g.input("x", {4, 3}, DType::F32);
  g.output("y", exp(x));
  g.output("c", cumsum(x, 0));  // not in the test backend's subset
  SessionOptions options;
  options.backend_name = "test";
  options.fallback_backend = "";  // no fallback: the op is an Error
  GraphSession s(g, options);
  s.write("x", Box{{0, 4}, {0, 3}}, random_values(12, 5));
  CHECK_THROWS_WITH_AS(s.read<float>("c", Box{{0, 4}, {0, 3}}),
                       doctest::Contains("backend test has no kernel for this op"), Error);
  std::vector<float> y = s.read<float>("y", Box{{0, 4}, {0, 3}});
  CHECK(y.size() == 12);
  absl::StatusOr<std::unique_ptr<Backend>> backend = BackendRegistry().create("test");
  REQUIRE(backend.ok());
  CHECK((*backend)->supports(g, g.node(x.id)).code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("backends: host buffers are opaque handles with checked box copies") {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  absl::StatusOr<BufferHandle> buffer = backend->allocate(4 * 4 * 3 + 8);
  REQUIRE(buffer.ok());
  REQUIRE(static_cast<bool>(*buffer));
  // A [2, 4) x [0, 3) region at byte offset 8 of the buffer.
  const BufferRegion region{*buffer, 8, DType::F32, Box{{2, 6}, {0, 3}}};
  const std::vector<float> rows = random_values(6, 7);
  REQUIRE(backend->copy_in(region, Box{{3, 5}, {0, 3}}, rows.data()).ok());
  std::vector<float> back(6);
  REQUIRE(backend->copy_out(region, Box{{3, 5}, {0, 3}}, back.data()).ok());
  CHECK(bitwise_equal(rows, back));
  std::vector<float> one(2);
  REQUIRE(backend->copy_out(region, Box{{4, 5}, {1, 3}}, one.data()).ok());
  CHECK(one[0] == rows[4]);
  CHECK(one[1] == rows[5]);
  auto* host = dynamic_cast<HostBackend*>(backend.get());
  REQUIRE(host != nullptr);
  const float* base = static_cast<const float*>(host->host_address(*buffer));
  REQUIRE(base != nullptr);
  CHECK(base[2 + 1 * 3 + 0] == rows[0]);  // byte offset 8 = 2 floats, row 3 is the second row

  CHECK(backend->copy_in(region, Box{{0, 3}, {0, 3}}, rows.data()).code() ==
        absl::StatusCode::kInvalidArgument);
  const BufferRegion past{*buffer, 16, DType::F32, Box{{2, 6}, {0, 3}}};
  CHECK(backend->copy_in(past, Box{{3, 4}, {0, 3}}, rows.data()).code() ==
        absl::StatusCode::kInvalidArgument);
  backend->free(*buffer);
  CHECK(backend->copy_out(region, Box{{3, 4}, {0, 3}}, back.data()).code() ==
        absl::StatusCode::kInvalidArgument);
  backend->free(*buffer);  // a second free does nothing
  CHECK(backend->allocate(-1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(backend->synchronize().ok());
}

// Group launches (HostBackend::run, kernels/view.h): the int8 linears that read the same x (q,
// k and v) run as one call when the read covers a few rows (one call per tile on a team), and
// give the bits of launches run one at a time (here: a read of all rows, too many to group).
TEST_CASE("backends: linears sharing x run as one group call, with the same bits") {
  const ScopedEnv int8("TESSERA_LINEAR", "int8");
  std::mt19937_64 rng(43);
  const int64_t rows = 24, k = 64, width = 576 + 192 + 192;
  Graph g;
  Tensor x = g.input("x", {rows, k}, DType::F32);
  std::vector<std::vector<uint8_t>> weights;
  std::vector<Tensor> ys;
  // SmolLM2-135M's q, k and v widths: a team cuts q along its columns and k and v (too narrow)
  // along their rows when each runs alone.
  for (int64_t n : {576, 192, 192}) {
    weights.push_back(testing::random_quantized(DType::Q4_1, n, k, rng));
    Tensor w = g.constant({n, k}, DType::Q4_1, std::as_bytes(std::span<const uint8_t>(weights.back())));
    ys.push_back(linear(x, w));
  }
  g.output("y", concat(ys, 1));
  std::vector<float> xs = random_values(rows * k, 5);
  const std::vector<float> edit = random_values(k, 6), edits = random_values(6 * k, 7);
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    SessionOptions options;
    options.threads = threads;
    GraphSession s(g, options);
    s.write("x", Box{{0, rows}, {0, k}}, xs);
    s.read<float>("y", Box{{0, rows}, {0, width}});
    CHECK(s.backend().stats().grouped_launches == 0);  // 24 rows: one launch each
    s.write("x", Box{{7, 8}, {0, k}}, edit);
    const std::vector<float> row = s.read<float>("y", Box{{7, 8}, {0, width}});
    CHECK(s.backend().stats().grouped_launches == 2);  // k and v ran inside q's call
    // Six rows (a team cuts the group into tiles of every member's columns).
    s.write("x", Box{{10, 16}, {0, k}}, edits);
    const std::vector<float> six = s.read<float>("y", Box{{10, 16}, {0, width}});
    CHECK(s.backend().stats().grouped_launches == 4);
    // A fresh session over the edited x, all rows at once.
    std::vector<float> edited = xs;
    std::copy(edit.begin(), edit.end(), edited.begin() + 7 * k);
    std::copy(edits.begin(), edits.end(), edited.begin() + 10 * k);
    GraphSession fresh(g, options);
    fresh.write("x", Box{{0, rows}, {0, k}}, edited);
    const std::vector<float> all = fresh.read<float>("y", Box{{0, rows}, {0, width}});
    CHECK(fresh.backend().stats().grouped_launches == 0);
    CHECK(bitwise_equal(row, std::vector<float>(all.begin() + 7 * width, all.begin() + 8 * width)));
    CHECK(bitwise_equal(six, std::vector<float>(all.begin() + 10 * width, all.begin() + 16 * width)));
  }
}

// A reshape that the memory plan placed over its input's block already holds its elements: the
// session gives its launch no boxes and the backend runs nothing for it (StepLaunch), on one
// thread and on a team, with the bits of the same ops without the reshape; a reshape computed
// straight into the caller's buffer (the read's target) still runs.
TEST_CASE("backends: an in-place reshape is not launched, with the same bits") {
  const int64_t rows = 6, cols = 8;
  Graph g, flat;
  Tensor x = g.input("x", {rows, cols}, DType::F32);
  Tensor r = reshape(exp(x), {rows, 2, 4});
  g.output("z", neg(r));
  g.output("r", r);
  Tensor fx = flat.input("x", {rows, cols}, DType::F32);
  Tensor e = exp(fx);
  flat.output("z", neg(e));
  flat.output("r", e);
  const std::vector<float> xs = random_values(rows * cols, 21), edit = random_values(cols, 22);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    SessionOptions options;
    options.threads = threads;
    options.cache_budget_bytes = 0;  // nothing kept: every read computes exp, reshape and neg
    GraphSession want(flat, options);
    want.write("x", Box{{0, rows}, {0, cols}}, xs);
    want.write("x", Box{{3, 4}, {0, cols}}, edit);
    const std::vector<float> want_z = want.read<float>("z", Box{{0, rows}, {0, cols}});
    const std::vector<float> want_r = want.read<float>("r", Box{{3, 4}, {0, cols}});
    GraphSession s(g, options);
    s.write("x", Box{{0, rows}, {0, cols}}, xs);
    s.write("x", Box{{3, 4}, {0, cols}}, edit);
    int64_t before = s.backend().stats().launches;
    const std::vector<float> z = s.read<float>("z", Box{{0, rows}, {0, 2}, {0, 4}});
    CHECK(s.stats().steps == 3);
    CHECK(s.backend().stats().launches - before == 2);  // exp and neg
    CHECK(bitwise_equal(z, want_z));
    const std::vector<float> row = s.read<float>("z", Box{{3, 4}, {0, 2}, {0, 4}});
    CHECK(bitwise_equal(row, std::vector<float>(want_z.begin() + 3 * cols, want_z.begin() + 4 * cols)));
    before = s.backend().stats().launches;
    const std::vector<float> rr = s.read<float>("r", Box{{3, 4}, {0, 2}, {0, 4}});
    CHECK(s.backend().stats().launches - before == 2);  // exp, then the reshape into the caller's row
    CHECK(bitwise_equal(rr, want_r));
  }
}

// A team of more members than K/V heads runs a decode step's attention over enough keys in its
// two phases (AttentionPhases: scores cut into tiles of keys, then values cut into columns),
// with the bits of one thread's fused call and of the same row of a full read; other teams cut
// the heads, with the same bits. K/V in f32, f16 or q8_0 (phases with AVX-512 VNNI only).
TEST_CASE("backends: a team's phased decode attention gives one thread's bits") {
  struct Case {
    int64_t hq, hkv, d, window;
    DType kv;
  };
  const int64_t s = 320;
  for (const Case& c : {Case{9, 3, 64, 0, DType::F16}, Case{4, 1, 256, 0, DType::F16}, Case{4, 1, 256, 300, DType::F32},
                        Case{6, 2, 40, 0, DType::F32}, Case{4, 1, 256, 0, DType::Q8_0}, Case{4, 1, 64, 300, DType::Q8_0},
                        Case{9, 3, 64, 0, DType::Q8_0}}) {
    CAPTURE(dtype_name(c.kv));
    CAPTURE(c.hq);
    CAPTURE(c.d);
    CAPTURE(c.window);
    Graph g;
    Tensor q = g.input("q", {s, c.hq, c.d}, DType::F32);
    Tensor k = g.input("k", {s, c.hkv, c.d}, DType::F32);
    Tensor v = g.input("v", {s, c.hkv, c.d}, DType::F32);
    AttentionParams params;
    params.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
    params.window = c.window;
    g.output("y", c.kv != DType::F32 ? attention(q, cast(k, c.kv), cast(v, c.kv), params) : attention(q, k, v, params));
    const std::vector<float> qs = random_values(s * c.hq * c.d, 11), ks = random_values(s * c.hkv * c.d, 12),
                             vs = random_values(s * c.hkv * c.d, 13);
    const int64_t width = c.hq * c.d;
    std::vector<std::vector<float>> rows;
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      SessionOptions options;
      options.threads = threads;
      GraphSession session(g, options);
      session.write("q", Box{{0, s}, {0, c.hq}, {0, c.d}}, qs);
      session.write("k", Box{{0, s}, {0, c.hkv}, {0, c.d}}, ks);
      session.write("v", Box{{0, s}, {0, c.hkv}, {0, c.d}}, vs);
      // Positions 300 (enough keys) and 100 (too few: the fused kernel's tiles), one at a time.
      for (int64_t t : {int64_t{300}, int64_t{100}})
        rows.push_back(session.read<float>("y", Box{{t, t + 1}, {0, c.hq}, {0, c.d}}));
      // The portable path (TESSERA_CPU_ISA=portable) has no phases, nor has q8_0 without VNNI:
      // their teams cut the heads.
      const bool phases = c.kv == DType::Q8_0 ? cpu::detected_isa() >= cpu::Isa::Avx512Vnni
                                              : cpu::detected_isa() != cpu::Isa::Portable;
      CHECK(session.backend().stats().phased_launches == (phases && threads > c.hkv ? 1 : 0));
      if (threads == 3) {
        const std::vector<float> all = session.read<float>("y", Box{{0, s}, {0, c.hq}, {0, c.d}});
        CHECK(bitwise_equal(rows[0], std::vector<float>(all.begin() + 300 * width, all.begin() + 301 * width)));
      }
    }
    for (size_t i = 2; i < rows.size(); ++i) CHECK(bitwise_equal(rows[i], rows[i % 2]));
  }
}

// Members that claim a values tile wait for the scores tiles; one that waited long enough to
// sleep (WorkerTeam::wait_at_least) must be woken when the last scores tile is done, not only
// when the launch is: long rows (slow scores tiles) on more members than cores. (Notified only
// at the launch's end, this test hung in 4 of 10 runs on a 2-core machine.)
TEST_CASE("backends: a team's phased attention wakes the members waiting for its scores") {
  const int64_t s = 16000, hq = 4, d = 256;
  Graph g;
  Tensor q = g.input("q", {s, hq, d}, DType::F32);
  Tensor k = g.input("k", {s, 1, d}, DType::F32);
  Tensor v = g.input("v", {s, 1, d}, DType::F32);
  AttentionParams params;
  params.scale = 0.0625;
  g.output("y", attention(q, k, v, params));
  const std::vector<float> qs = random_values(s * hq * d, 21), ks = random_values(s * d, 22), vs = random_values(s * d, 23);
  std::vector<std::vector<float>> rows[2];
  for (int threads : {1, 4}) {
    CAPTURE(threads);
    SessionOptions options;
    options.threads = threads;
    GraphSession session(g, options);
    session.write("q", Box{{0, s}, {0, hq}, {0, d}}, qs);
    session.write("k", Box{{0, s}, {0, 1}, {0, d}}, ks);
    session.write("v", Box{{0, s}, {0, 1}, {0, d}}, vs);
    for (int64_t t = s - 24; t < s; ++t)
      rows[threads > 1].push_back(session.read<float>("y", Box{{t, t + 1}, {0, hq}, {0, d}}));
    CHECK(session.backend().stats().phased_launches == (threads > 1 && cpu::detected_isa() != cpu::Isa::Portable ? 24 : 0));
  }
  for (size_t i = 0; i < rows[0].size(); ++i) CHECK(bitwise_equal(rows[0][i], rows[1][i]));
}
