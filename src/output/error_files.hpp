// ErrorFiles: each local rank's TORCHELASTIC_ERROR_FILE, the file PyTorch's
// @record (torch.distributed.elastic.multiprocessing.errors) writes a failing
// rank's exception and traceback to. LOG_DIR/<rank>/error.json when there is a
// log directory (LOG_DIR/<rank>/attempt_N/error.json in round N), else a file
// per rank in the job's private directory: <rank>.json (<rank>.attempt_N.json
// in round N). No directory per rank: a launch costs one mkdir at most.
// Not thread-safe; owned by the Agent.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "posix/fd.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

class ErrorFiles {
 public:
  // `job_dir`: the job's private directory, made and removed by the owner
  // (the JobGuard, which removes it even when the launcher is killed); empty:
  // this object makes one on first use and removes it with itself.
  explicit ErrorFiles(std::string job_dir = {}) : m_job_dir(std::move(job_dir)) {}
  ~ErrorFiles();
  ErrorFiles(const ErrorFiles&) = delete;
  ErrorFiles& operator=(const ErrorFiles&) = delete;

  // Chooses the paths for a round; in a log directory, what an earlier job
  // left there is kept (renamed: keep_earlier()). Never throws: without a
  // writable place the workers get no error file.
  void start(const std::string& log_dir, const JobLayout& layout);
  // The path for a local rank; empty when there is none.
  std::string path(int local_rank) const;
  // What the rank wrote, at most k_max_bytes; nullopt when it wrote nothing.
  std::optional<std::string> read(int local_rank) const;

  static constexpr size_t k_max_bytes = 256 * 1024;

 private:
  std::string m_log_dir;  // the --log-dir, or empty
  std::string m_job_dir;  // the private directory, when there is no log directory
  bool m_owns_job_dir = false;
  posix::Fd m_job_dir_lock;  // says the directory is in use (posix::JobDir)
  int m_rank_offset = 0;
  int m_round = 0;
};

}  // namespace ddplaunch
