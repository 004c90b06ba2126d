// ErrorFiles: each local rank's TORCHELASTIC_ERROR_FILE, the file PyTorch's
// @record (torch.distributed.elastic.multiprocessing.errors) writes a failing
// rank's exception and traceback to. LOG_DIR/<rank>/error.json when there is a
// log directory (LOG_DIR/<rank>/attempt_N/error.json in round N), else
// under a private directory removed with this object.
// Not thread-safe; owned by the Agent.
#pragma once

#include <optional>
#include <string>

#include "topology/topology.hpp"

namespace ddplaunch {

class ErrorFiles {
 public:
  ErrorFiles() = default;
  ~ErrorFiles();
  ErrorFiles(const ErrorFiles&) = delete;
  ErrorFiles& operator=(const ErrorFiles&) = delete;

  // Chooses the paths for a round and keeps what an earlier job left there
  // (renamed: keep_earlier()). Never throws: without a writable place the
  // workers get no error file.
  void start(const std::string& log_dir, const JobLayout& layout);
  // The path for a local rank; empty when there is none.
  std::string path(int local_rank) const;
  // What the rank wrote, at most k_max_bytes; nullopt when it wrote nothing.
  std::optional<std::string> read(int local_rank) const;

  static constexpr size_t k_max_bytes = 256 * 1024;

 private:
  std::string m_dir;          // where the per-rank directories are
  std::string m_private_dir;  // ours to remove, when there is no log directory
  int m_rank_offset = 0;
  int m_round = 0;
};

}  // namespace ddplaunch
