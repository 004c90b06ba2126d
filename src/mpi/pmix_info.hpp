// pmix_info_t arrays, both ways: InfoList builds the ones this launcher hands
// libpmix (PMIx's macros call into the library, which is not linked), and
// the readers take apart the ones libpmix hands its upcalls: a flag as PMIx
// defines it, a timeout, and the first directive marked required
// (PMIX_INFO_REQD) that the host does not know, which PMIx says the host
// must refuse rather than ignore. Pure; only where the build has libpmix's
// headers. Not thread-safe (a list is one thread's).
#pragma once

#if DDPLAUNCH_HAVE_PMIX

#include <pmix_common.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddplaunch {

// Every string an entry points at is owned here, and the array stays put
// while libpmix reads it (data() is read only once the list is complete).
class InfoList {
 public:
  void u32(const char* key, uint32_t v) { add(key, PMIX_UINT32).data.uint32 = v; }
  void rank(const char* key, uint32_t v) { add(key, PMIX_PROC_RANK).data.rank = v; }
  void flag(const char* key, bool v) { add(key, PMIX_BOOL).data.flag = v; }
  // `topology` must outlive the list's use.
  void topology(const char* key, pmix_topology_t* topology) {
    add(key, PMIX_TOPO).data.topo = topology;
  }
  void str(const char* key, std::string v) {
    m_strings.push_back(std::move(v));
    add(key, PMIX_STRING).data.string = m_strings.back().data();
  }
  pmix_info_t* data() { return m_info.empty() ? nullptr : m_info.data(); }
  size_t size() const { return m_info.size(); }

 private:
  pmix_value_t& add(const char* key, pmix_data_type_t type) {
    pmix_info_t info;
    std::memset(&info, 0, sizeof info);
    std::strncpy(info.key, key, PMIX_MAX_KEYLEN);
    info.value.type = type;
    m_info.push_back(info);
    return m_info.back().value;
  }
  std::vector<pmix_info_t> m_info;
  std::deque<std::string> m_strings;
};

inline pmix_proc_t make_proc(const std::string& nspace, uint32_t rank) {
  pmix_proc_t p;
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.nspace, nspace.c_str(), PMIX_MAX_NSLEN);
  p.rank = rank;
  return p;
}

inline bool info_is(const pmix_info_t& info, const char* key) {
  return std::strncmp(info.key, key, PMIX_MAX_KEYLEN) == 0;
}

// A flag as PMIx reads one (PMIx_Info_true): no value at all is true, a
// boolean is itself, anything else is false.
inline bool info_true(const pmix_info_t& info) {
  return info.value.type == PMIX_UNDEF || (info.value.type == PMIX_BOOL && info.value.data.flag);
}

// A whole number of seconds (PMIX_TIMEOUT is an int); nullopt for any other
// type or a value not above zero (PMIx's "no timeout").
inline std::optional<std::chrono::seconds> info_seconds(const pmix_info_t& info) {
  long long v = 0;
  switch (info.value.type) {
    case PMIX_INT:
      v = info.value.data.integer;
      break;
    case PMIX_INT32:
      v = info.value.data.int32;
      break;
    case PMIX_UINT32:
      v = info.value.data.uint32;
      break;
    case PMIX_UINT:
      v = info.value.data.uint;
      break;
    default:
      return std::nullopt;
  }
  return v > 0 ? std::optional(std::chrono::seconds(v)) : std::nullopt;
}

// The key of the first entry marked required (PMIX_INFO_REQD) that is not
// one of `known`; empty when there is none.
inline std::string first_unknown_required(const pmix_info_t* info, size_t ninfo,
                                          std::initializer_list<const char*> known) {
  for (size_t i = 0; i < ninfo && info != nullptr; ++i) {
    if ((info[i].flags & PMIX_INFO_REQD) == 0) {
      continue;
    }
    bool found = false;
    for (const char* k : known) {
      found = found || info_is(info[i], k);
    }
    if (!found) {
      return std::string(info[i].key, strnlen(info[i].key, PMIX_MAX_KEYLEN));
    }
  }
  return "";
}

}  // namespace ddplaunch

#endif
