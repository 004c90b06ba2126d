// Files in other languages, compiled into the binary at build time by
// cmake/Embed.cmake: each is the source file's text, unchanged but for the
// stylesheets and scripts a page names, put inside it. Pure.
#pragma once

#include <string_view>

namespace ddplaunch::embedded {

// src/output/page/index.html with page.css and page.js inside: the live
// page of --metrics-port (docs/METRICS.md).
std::string_view status_page();
// src/agent/sitecustomize.py: --python-stacks-signal's hook (docs/STATUS.md).
std::string_view python_stacks_hook();

}  // namespace ddplaunch::embedded
