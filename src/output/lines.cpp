#include "output/lines.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#if defined(__x86_64__)  // where SSE2 is the baseline
#include <immintrin.h>
#define DDPLAUNCH_X86_SIMD 1
#if __has_include(<sys/platform/x86.h>)
// glibc's own CPU features: no CPUID of ours. The header is C's: clang's
// C++ has no _Bool (GCC's takes it as an extension).
#if defined(__clang__)
#define _Bool bool
#endif
#include <sys/platform/x86.h>
#if defined(__clang__)
#undef _Bool
#endif
#endif
#endif

namespace ddplaunch {

#if defined(DDPLAUNCH_X86_SIMD)
namespace {

// The two instruction sets LineBatch::add_lines() is built for. One loop,
// add_lines_with() below, is compiled for each: it is flattened into a
// function built for that set, so these inline into it there.
struct Sse2 {
  static constexpr size_t k_overrun = 15;  // bytes copy() may write and read past n
  // A bit per '\n' of 64 bytes, and one per '\r'.
  static void ends(const char* block, uint64_t& newlines, uint64_t& returns) {
    const __m128i nl = _mm_set1_epi8('\n');
    const __m128i cr = _mm_set1_epi8('\r');
    newlines = returns = 0;
    for (int i = 0; i < 4; ++i) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * i));
      newlines |= bits(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, nl))) << (16 * i);
      returns |= bits(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, cr))) << (16 * i);
    }
  }
  static uint64_t bits(int mask16) { return static_cast<uint16_t>(mask16); }
  static void copy(char* to, const char* from, size_t n) {
    for (size_t at = 0; at < n; at += 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to + at),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + at)));
    }
  }
};

struct Avx2 {
  static constexpr size_t k_overrun = 31;
  [[gnu::target("avx2")]] static void ends(const char* block, uint64_t& newlines,
                                           uint64_t& returns) {
    const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32));
    newlines = bits(low, high, _mm256_set1_epi8('\n'));
    returns = bits(low, high, _mm256_set1_epi8('\r'));
  }
  [[gnu::target("avx2")]] static uint64_t bits(__m256i low, __m256i high, __m256i byte) {
    return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(low, byte))) |
           static_cast<uint64_t>(
               static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(high, byte))))
               << 32;
  }
  [[gnu::target("avx2")]] static void copy(char* to, const char* from, size_t n) {
    for (size_t at = 0; at < n; at += 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + at),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + at)));
    }
  }
};

// The batch's buffer [buf, buf + size) holds `used` bytes. Every load and
// store stays inside what the caller may read and write: a block's 64 bytes
// and a line's copy (up to k_overrun bytes past its '\n', which is inside the
// block) end at least k_overrun bytes before readable_end, and a line is
// copied only when its prefix's 16-byte store and its copy fit the room.
template <class V>
size_t add_lines_with(char* buf, size_t size, size_t& used, size_t flush_at, const char* prefix16,
                      size_t prefix_size, const char*& p, const char* run_end,
                      const char* readable_end, size_t max_line) {
  const __m128i prefix = _mm_loadu_si128(reinterpret_cast<const __m128i*>(prefix16));
  const char* line = p;
  size_t at = used;
  size_t added = 0;
  const char* first_return = nullptr;  // the first '\r' at or after `line`, once seen
  for (const char* block = line;
       at < flush_at && readable_end - block >= static_cast<ptrdiff_t>(64 + V::k_overrun);
       block += 64) {
    uint64_t newlines = 0;
    uint64_t returns = 0;
    V::ends(block, newlines, returns);
    if (first_return == nullptr && returns != 0) {
      first_return = block + __builtin_ctzll(returns);
    }
    for (; newlines != 0; newlines &= newlines - 1) {
      const char* nl = block + __builtin_ctzll(newlines);
      const auto len = static_cast<size_t>(nl - line);  // without its '\n'
      if (nl >= run_end || len >= max_line || (first_return != nullptr && first_return < nl) ||
          size - at < std::max<size_t>(16, prefix_size + len + 1 + V::k_overrun)) {
        used = at;
        p = line;
        return added;
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(buf + at), prefix);
      V::copy(buf + at + prefix_size, line, len + 1);
      at += prefix_size + len + 1;
      line = nl + 1;
      ++added;
      if (at >= flush_at) {
        break;
      }
    }
  }
  used = at;
  p = line;
  return added;
}

[[gnu::flatten]] size_t add_lines_sse2(char* buf, size_t size, size_t& used, size_t flush_at,
                                       const char* prefix16, size_t prefix_size, const char*& p,
                                       const char* run_end, const char* readable_end,
                                       size_t max_line) {
  return add_lines_with<Sse2>(buf, size, used, flush_at, prefix16, prefix_size, p, run_end,
                              readable_end, max_line);
}

[[gnu::flatten, gnu::target("avx2")]] size_t add_lines_avx2(
    char* buf, size_t size, size_t& used, size_t flush_at, const char* prefix16, size_t prefix_size,
    const char*& p, const char* run_end, const char* readable_end, size_t max_line) {
  return add_lines_with<Avx2>(buf, size, used, flush_at, prefix16, prefix_size, p, run_end,
                              readable_end, max_line);
}

}  // namespace
#endif

LineBatch::Simd LineBatch::simd_here() {
#if defined(DDPLAUNCH_X86_SIMD)
  // What glibc found when it started (it chose its own memchr by it), not
  // __builtin_cpu_supports: that links libgcc's start-up probe, a dozen
  // CPUID instructions at every launch, and one CPUID costs 7 us in a VM.
#if defined(CPU_FEATURE_ACTIVE)
  static const Simd here = CPU_FEATURE_ACTIVE(AVX2) ? Simd::k_avx2 : Simd::k_sse2;
  return here;
#else
  return Simd::k_sse2;
#endif
#else
  return Simd::k_none;
#endif
}

size_t LineBatch::add_lines(Simd simd, const char (&prefix16)[16], size_t prefix_size,
                            const char*& p, const char* run_end, const char* readable_end,
                            size_t max_line) {
  simd = std::min(simd, simd_here());  // never an instruction this CPU lacks
  if (simd == Simd::k_none || prefix_size > 16) {
    return 0;
  }
  if (m_buf.size() < k_buffer_bytes) {
    m_buf.resize(k_buffer_bytes);  // as add() would (a batch handed over may be smaller)
  }
#if defined(DDPLAUNCH_X86_SIMD)
  auto* const with = simd == Simd::k_avx2 ? add_lines_avx2 : add_lines_sse2;
  return with(m_buf.data(), m_buf.size(), m_used, k_flush_bytes, prefix16, prefix_size, p, run_end,
              readable_end, max_line);
#else
  (void)prefix16, (void)p, (void)run_end, (void)readable_end, (void)max_line;
  return 0;
#endif
}

LinePrefix::LinePrefix(std::string_view tmpl, const Fields& fields) {
  m_parts.emplace_back();
  size_t pos = 0;
  while (pos < tmpl.size()) {
    if (tmpl[pos] != '{') {
      m_parts.back().push_back(tmpl[pos++]);
      continue;
    }
    size_t close = tmpl.find('}', pos);
    if (close == std::string_view::npos) {
      m_parts.back().append(tmpl.substr(pos));
      break;
    }
    std::string_view name = tmpl.substr(pos + 1, close - pos - 1);
    if (name == "rank") {
      m_parts.back() += std::to_string(fields.rank);
    } else if (name == "local_rank") {
      m_parts.back() += std::to_string(fields.local_rank);
    } else if (name == "node_rank") {
      m_parts.back() += std::to_string(fields.node_rank);
    } else if (name == "host") {
      m_parts.back() += fields.host;
    } else if (name == "time") {
      m_parts.emplace_back();  // a time field separates two fixed parts
    } else {
      m_parts.back().append(tmpl.substr(pos, close - pos + 1));
    }
    pos = close + 1;
  }
}

void LinePrefix::append_to(std::string& out, std::time_t now) const {
  out += m_parts[0];
  if (m_parts.size() == 1) {
    return;
  }
  std::tm tm_now = {};
  localtime_r(&now, &tm_now);
  char buf[16];
  size_t n = std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm_now);
  for (size_t i = 1; i < m_parts.size(); ++i) {
    out.append(buf, n);
    out += m_parts[i];
  }
}

void TailBuffer::push(std::string_view line) {
  if (m_max_lines == 0) {
    return;
  }
  line = line.substr(0, m_max_line_bytes);
  if (m_ring.size() < m_max_lines) {
    m_ring.emplace_back(line);
    return;
  }
  // Reuse the oldest line's storage: no allocation per line of a stderr flood.
  m_ring[m_next].assign(line);
  m_next = (m_next + 1) % m_max_lines;
}

void TailBuffer::grow(size_t max_lines) {
  if (max_lines <= m_max_lines) {
    return;
  }
  m_ring = lines();  // oldest first: the ring starts over at index 0
  m_next = 0;
  m_max_lines = max_lines;
}

std::vector<std::string> TailBuffer::lines() const {
  std::vector<std::string> out;
  out.reserve(m_ring.size());
  for (size_t i = 0; i < m_ring.size(); ++i) {
    out.push_back(m_ring[(m_next + i) % m_ring.size()]);
  }
  return out;
}

size_t count_newlines(std::string_view data) {
  size_t n = 0;
  size_t i = 0;
#if defined(DDPLAUNCH_X86_SIMD)
  const __m128i nl = _mm_set1_epi8('\n');
  for (; i + 16 <= data.size(); i += 16) {
    const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data.data() + i));
    n += static_cast<size_t>(
        __builtin_popcount(static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(chunk, nl)))));
  }
#endif
  for (; i < data.size(); ++i) {
    n += data[i] == '\n' ? 1 : 0;
  }
  return n;
}

}  // namespace ddplaunch
