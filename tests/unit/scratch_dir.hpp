// ScratchDir: a fresh directory under the system's temporary directory for
// one test, removed with its contents at the end.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ddplaunch {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "ddplaunch-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    m_path = ::mkdtemp(tmpl.data());
  }
  ~ScratchDir() { std::filesystem::remove_all(m_path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string operator/(const std::string& name) const { return (m_path / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::filesystem::create_directories((m_path / name).parent_path());
    std::ofstream(m_path / name) << text;
  }
  void mkdir(const std::string& name) const { std::filesystem::create_directories(m_path / name); }

 private:
  std::filesystem::path m_path;
};

}  // namespace ddplaunch
