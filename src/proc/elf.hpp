// What an executable links: the DT_NEEDED entries of an ELF file's dynamic
// section, read with a few pread()s (its headers, the dynamic section and its
// string table; nothing else of the file). Used once a launch, to tell a
// native MPI program (whose ranks get a terminal for stdout, as under
// mpirun) from the rest. 64-bit little-endian ELF only; anything else links
// nothing here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddplaunch {

// The libraries `path` names as DT_NEEDED ("libmpi.so.40", "libc.so.6"), in
// order; empty for a script, a static program, an unreadable or malformed file.
std::vector<std::string> elf_needed(const std::string& path);

// Whether one of them starts with `prefix`.
bool elf_needs(const std::string& path, std::string_view prefix);

}  // namespace ddplaunch
