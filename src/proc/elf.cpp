#include "proc/elf.hpp"

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "posix/fd.hpp"

namespace ddplaunch {

namespace {

// Bounds on what is read: a dynamic section of 4,096 entries, a string
// table of 1 MiB, 64 program headers.
constexpr size_t k_max_dynamic = 4096 * sizeof(Elf64_Dyn);
constexpr size_t k_max_strtab = 1 << 20;
constexpr size_t k_max_headers = 64;

bool read_at(int fd, void* out, size_t size, uint64_t offset) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n =
        ::pread(fd, static_cast<char*>(out) + got, size - got, static_cast<off_t>(offset + got));
    if (n <= 0) {
      return false;
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::vector<std::string> elf_needed(const std::string& path) {
  std::vector<std::string> out;
  posix::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  Elf64_Ehdr eh{};
  if (!fd || !read_at(fd.get(), &eh, sizeof eh, 0) ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum == 0 || eh.e_phnum > k_max_headers) {
    return out;
  }
  std::vector<Elf64_Phdr> headers(eh.e_phnum);
  if (!read_at(fd.get(), headers.data(), headers.size() * sizeof(Elf64_Phdr), eh.e_phoff)) {
    return out;
  }
  const Elf64_Phdr* dynamic = nullptr;
  for (const auto& h : headers) {
    dynamic = h.p_type == PT_DYNAMIC ? &h : dynamic;
  }
  if (dynamic == nullptr || dynamic->p_filesz == 0 || dynamic->p_filesz > k_max_dynamic) {
    return out;  // a static program
  }
  std::vector<Elf64_Dyn> entries(dynamic->p_filesz / sizeof(Elf64_Dyn));
  if (!read_at(fd.get(), entries.data(), entries.size() * sizeof(Elf64_Dyn), dynamic->p_offset)) {
    return out;
  }
  uint64_t strtab = 0, strsz = 0;
  std::vector<uint64_t> needed;
  for (const auto& e : entries) {
    if (e.d_tag == DT_NULL) {
      break;
    }
    if (e.d_tag == DT_NEEDED) {
      needed.push_back(e.d_un.d_val);
    } else if (e.d_tag == DT_STRTAB) {
      strtab = e.d_un.d_ptr;
    } else if (e.d_tag == DT_STRSZ) {
      strsz = e.d_un.d_val;
    }
  }
  if (needed.empty() || strsz == 0 || strsz > k_max_strtab) {
    return out;
  }
  // DT_STRTAB is an address: the loadable segment holding it gives its offset.
  std::optional<uint64_t> offset;
  for (const auto& h : headers) {
    if (h.p_type == PT_LOAD && strtab >= h.p_vaddr && strtab + strsz <= h.p_vaddr + h.p_filesz) {
      offset = h.p_offset + (strtab - h.p_vaddr);
    }
  }
  std::string strings(strsz, '\0');
  if (!offset || !read_at(fd.get(), strings.data(), strings.size(), *offset)) {
    return out;
  }
  for (uint64_t at : needed) {
    if (at < strings.size()) {
      out.emplace_back(strings.c_str() + at, strnlen(strings.c_str() + at, strings.size() - at));
    }
  }
  return out;
}

bool elf_needs(const std::string& path, std::string_view prefix) {
  for (const auto& name : elf_needed(path)) {
    if (name.starts_with(prefix)) {
      return true;
    }
  }
  return false;
}

}  // namespace ddplaunch
