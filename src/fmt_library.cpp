// fmt's compiled part, built once into the binary. Debian ships libfmt only
// as a shared library, and the binary must need nothing but libc; the
// header-only form (FMT_HEADER_ONLY) instead compiles fmt's implementation
// into every file that formats, 5 s of compile time each. So every file
// includes <fmt/format.h> as declarations only, and this one includes the
// implementation Debian's libfmt-dev ships (format-inl.h), with the template
// instances format.h declares `extern`.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
FMT_BEGIN_DETAIL_NAMESPACE
template auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> char;
template auto decimal_point_impl(locale_ref) -> wchar_t;
FMT_END_DETAIL_NAMESPACE
FMT_END_NAMESPACE
