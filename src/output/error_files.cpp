#include "output/error_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "log.hpp"
#include "output/router.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

ErrorFiles::~ErrorFiles() {
  if (!m_private_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(m_private_dir, ec);
  }
}

void ErrorFiles::start(const std::string& log_dir, const JobLayout& layout) {
  m_rank_offset = layout.rank_offset;
  m_round = layout.round;
  m_dir = log_dir;
  if (m_dir.empty() && m_private_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ddplaunch-errors-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      log::debug("no TORCHELASTIC_ERROR_FILE for the workers: cannot create {}", tmpl);
      return;
    }
    m_private_dir = tmpl;
  }
  if (m_dir.empty()) {
    m_dir = m_private_dir;
  }
  for (int lr = 0; lr < layout.local_world_size; ++lr) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path(lr)).parent_path(), ec);
    keep_earlier(path(lr));  // an earlier job's error is not this one's, and it is kept
  }
}

std::string ErrorFiles::path(int local_rank) const {
  if (m_dir.empty()) {
    return {};
  }
  return (rank_log_dir(m_dir, m_rank_offset + local_rank, m_round) / "error.json").string();
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
