// llm_bench's peers: llama.cpp (llama-cpp-python) and PyTorch + transformers, each a Python
// subprocess (bench/peer_*.py --serve) that loads the model once and then measures one round
// per line it reads, so that llm_bench can alternate rounds with its own.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace tessera::bench {

// One round's measurements.
struct Figures {
  double prefill128 = 0, prefill512 = 0, decode128 = 0, decode1024 = 0;  // seconds (per token for decode)
  // Of the last prefill and decode reads: steps on the fallback backend and explicit copies.
  int64_t prefill_fallback = 0, decode_fallback = 0, decode_copies = 0;
};

// A peer engine in a Python subprocess (bench/peer_*.py --serve): it loads the model once, then
// measures one round per line written to its stdin and answers one line of four seconds.
class Peer {
 public:
  // kv: the K/V cache dtype asked of the peer ("" for its default).
  Peer(const std::string& script, const std::string& model, int threads, int steps, const std::string& kv) {
    // Close-on-exec: a later peer must not inherit this one's pipe ends (its stdin would then
    // never see end-of-file). dup2 clears the flag on the child's stdin and stdout.
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0) return;
    if (pipe2(from_child, O_CLOEXEC) != 0) {
      close(to_child[0]);
      close(to_child[1]);
      return;
    }
    const std::string threads_arg = std::to_string(threads), steps_arg = std::to_string(steps);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, 2);  // progress bars and warnings
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
      if (kv.empty())
        execl(".venv/bin/python", ".venv/bin/python", script.c_str(), "--serve", "--threads", threads_arg.c_str(),
              "--steps", steps_arg.c_str(), model.c_str(), static_cast<char*>(nullptr));
      else
        execl(".venv/bin/python", ".venv/bin/python", script.c_str(), "--serve", "--threads", threads_arg.c_str(),
              "--steps", steps_arg.c_str(), "--kv", kv.c_str(), model.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    from_ = fdopen(from_child[0], "r");
    char line[256];
    ready_ = pid_ > 0 && to_ != nullptr && from_ != nullptr && std::fgets(line, sizeof(line), from_) != nullptr &&
             std::strncmp(line, "ready", 5) == 0;
  }
  ~Peer() {
    if (to_ != nullptr) std::fclose(to_);  // end of input: the peer exits
    if (from_ != nullptr) std::fclose(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  bool ready() const { return ready_; }

  // One round; false (and the peer is no longer ready) when it failed.
  bool round(Figures& out) {
    char line[1024];
    ready_ = ready_ && std::fputs("go\n", to_) >= 0 && std::fflush(to_) == 0 &&
             std::fgets(line, sizeof(line), from_) != nullptr &&
             std::sscanf(line, "%lf %lf %lf %lf", &out.prefill128, &out.prefill512, &out.decode128, &out.decode1024) == 4;
    return ready_;
  }

 private:
  pid_t pid_ = -1;
  std::FILE* to_ = nullptr;
  std::FILE* from_ = nullptr;
  bool ready_ = false;
};

struct PeerKind {
  const char* label;   // in the table
  const char* script;  // under bench/
  const char* module;  // that the Python must import
  bool q8_0_kv;        // whether it can keep a q8_0 K/V cache (--kv q8_0)
};
inline constexpr PeerKind kPeers[] = {{"llama.cpp", "bench/peer_llama_cpp.py", "llama_cpp", true},
                                      {"torch", "bench/peer_transformers.py", "transformers", false}};

}  // namespace tessera::bench
