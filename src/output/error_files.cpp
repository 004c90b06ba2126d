#include "output/error_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "log.hpp"
#include "output/router.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

ErrorFiles::~ErrorFiles() {
  if (m_owns_job_dir) {
    std::error_code ec;
    std::filesystem::remove_all(m_job_dir, ec);
  }
}

void ErrorFiles::start(const std::string& log_dir, const JobLayout& layout) {
  m_rank_offset = layout.rank_offset;
  m_round = layout.round;
  m_log_dir = log_dir;
  if (!m_log_dir.empty()) {
    for (int lr = 0; lr < layout.local_world_size; ++lr) {
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(path(lr)).parent_path(), ec);
      keep_earlier(path(lr));  // an earlier job's error is not this one's, and it is kept
    }
    return;
  }
  if (m_job_dir.empty()) {
    posix::JobDir dir = posix::make_job_dir();
    m_job_dir = std::move(dir.path);
    m_job_dir_lock = std::move(dir.lock);
    m_owns_job_dir = !m_job_dir.empty();
    if (m_job_dir.empty()) {
      log::debug("no TORCHELASTIC_ERROR_FILE for the workers: cannot create a directory in {}",
                 posix::temp_dir());
    }
  }
}

std::string ErrorFiles::path(int local_rank) const {
  const int rank = m_rank_offset + local_rank;
  if (!m_log_dir.empty()) {
    return (rank_log_dir(m_log_dir, rank, m_round) / "error.json").string();
  }
  if (m_job_dir.empty()) {
    return {};
  }
  return m_job_dir + "/" + std::to_string(rank) +
         (m_round > 0 ? ".attempt_" + std::to_string(m_round) : std::string()) + ".json";
}

std::optional<std::string> ErrorFiles::read(int local_rank) const {
  const std::string p = path(local_rank);
  if (p.empty()) {
    return std::nullopt;
  }
  posix::Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    return std::nullopt;
  }
  std::string text(k_max_bytes, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n <= 0) {
      break;
    }
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  if (text.empty()) {
    return std::nullopt;
  }
  return text;
}

}  // namespace ddplaunch
