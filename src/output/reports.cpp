#include "output/reports.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "config/launch_error.hpp"
#include "log.hpp"
#include "output/report_json.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

// Refuses, before anything starts, a --summary-json path that cannot be
// written (the summary would otherwise be lost at the very end). Two nodes
// on one host check one path at once before they know their node ranks:
// the other's probe file, there for EXCL and gone for the second open, is
// no reason to refuse, so that case tries again.
void check_summary_path(const std::string& path) {
  if (path.empty()) {
    return;
  }
  int fd = -1;
  bool created = false;
  for (int tries = 0; tries < 100; ++tries) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created = fd >= 0;
    if (created || errno != EEXIST) {
      break;
    }
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT) {
      break;
    }
  }
  if (fd < 0) {
    throw UsageError("--summary-json " + path + ": cannot write it (" + std::strerror(errno) +
                     "); check the directory exists and is writable");
  }
  ::close(fd);
  if (created) {
    ::unlink(path.c_str());
  }
}

// An inherited TORCHELASTIC_ERROR_FILE (a scheduler's, or an outer torchrun's)
// receives the root cause's error, as torchrun's own @record writes it; with
// no error file from that rank, what ddplaunch knows of its end.
void write_inherited_error_file(const EnvMap& env, const JobSummary& summary) {
  auto it = env.find("TORCHELASTIC_ERROR_FILE");
  if (it == env.end() || it->second.empty() || summary.exit_code == 0 || !summary.root_cause) {
    return;
  }
  const RankOutcome& r = *summary.root_cause;
  WorkerError error;
  if (r.error) {
    error = *r.error;
  } else {
    error.message = "ddplaunch: " + describe_outcome(r);
    for (const auto& line : r.last_stderr) {
      error.traceback += line + "\n";
    }
    error.timestamp = std::to_string(static_cast<long long>(r.end_time));
  }
  std::ofstream out(it->second, std::ios::trunc);
  out << encode_error_file(error, summary.exit_code);
  out.close();
  if (!out) {
    log::warn("cannot write the root cause's error to TORCHELASTIC_ERROR_FILE={}", it->second);
  }
}

std::optional<std::string> summary_path(const std::string& path, std::optional<int> node_rank) {
  if (path.empty()) {
    return std::nullopt;
  }
  static constexpr std::string_view k_field = "{node_rank}";
  std::string out = path;
  const std::string rank = std::to_string(node_rank.value_or(0));
  for (size_t at; (at = out.find(k_field)) != std::string::npos;) {
    out.replace(at, k_field.size(), rank);
  }
  return out;
}

namespace {

bool written_since(const std::string& path, double job_start) {
  struct stat st = {};
  if (::stat(path.c_str(), &st) != 0) {
    return false;
  }
  const double written =
      static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
  return written >= job_start;
}

}  // namespace

void write_summary_json(const std::string& path, const JobSummary& summary, bool keep_this_jobs,
                        double job_start) {
  if (keep_this_jobs && written_since(path, job_start)) {
    return;
  }
  std::string tmp = path + ".XXXXXX";
  const posix::Fd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  const mode_t umask_now = ::umask(0);
  ::umask(umask_now);
  bool ok = fd && ::fchmod(fd.get(), 0666 & ~umask_now) == 0 &&
            posix::write_all(fd.get(), encode_summary(summary));
  if (ok && keep_this_jobs) {
    // Put in place only where nothing is; a file that is there is an
    // earlier job's (replaced) unless node 0 wrote it meanwhile (kept).
    // (A file system without hard links takes the rename.)
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      ok = (errno == EEXIST && written_since(path, job_start)) ||
           ::rename(tmp.c_str(), path.c_str()) == 0;
    }
  } else if (ok) {
    ok = ::rename(tmp.c_str(), path.c_str()) == 0;
  }
  if (fd) {
    ::unlink(tmp.c_str());  // gone already when renamed
  }
  if (!ok) {
    log::error("--summary-json: cannot write {}; check the directory exists and is writable", path);
  }
}

}  // namespace ddplaunch
