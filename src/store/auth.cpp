#include "store/auth.hpp"

// The functions used here are in libcrypto 1.1 and 3 alike: 3's headers are
// asked for 1.1.1's interface, so that HMAC_CTX (deprecated there, not
// removed) is declared without a warning.
#define OPENSSL_API_COMPAT 10101
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "posix/library.hpp"

namespace ddplaunch::auth {

namespace {

// OpenSSL's libcrypto, loaded at the first use (dlopen), not linked: a
// launch that never authenticates (one node, no `ddplaunch store` client)
// never pays its start-up, about 0.4 ms of every launch when it was linked
// in statically (its tables' relocations, its CPUID probe). libcrypto 3
// (Debian 12, Ubuntu 22.04, RHEL 9), else 1.1 (Debian 11, Ubuntu 20.04):
// the same functions, with the same meaning, in both. Each pointer has the
// type of the function the header declares.
struct Crypto {
  decltype(&::HMAC) HMAC = nullptr;
  decltype(&::EVP_sha256) EVP_sha256 = nullptr;
  decltype(&::CRYPTO_memcmp) CRYPTO_memcmp = nullptr;
  decltype(&::EVP_PKEY_CTX_new_id) EVP_PKEY_CTX_new_id = nullptr;
  decltype(&::EVP_PKEY_derive_init) EVP_PKEY_derive_init = nullptr;
  decltype(&::EVP_PKEY_CTX_ctrl) EVP_PKEY_CTX_ctrl = nullptr;
  decltype(&::EVP_PKEY_derive) EVP_PKEY_derive = nullptr;
  decltype(&::EVP_PKEY_CTX_free) EVP_PKEY_CTX_free = nullptr;
  decltype(&::OPENSSL_cleanse) OPENSSL_cleanse = nullptr;
  decltype(&::HMAC_CTX_new) HMAC_CTX_new = nullptr;
  decltype(&::HMAC_CTX_free) HMAC_CTX_free = nullptr;
  decltype(&::HMAC_Init_ex) HMAC_Init_ex = nullptr;
  decltype(&::HMAC_Update) HMAC_Update = nullptr;
  decltype(&::HMAC_Final) HMAC_Final = nullptr;
};

void* open_crypto(std::string& why) {
  std::string why_3;
  if (void* handle = posix::open_library("libcrypto.so.3", "libssl3", why_3); handle != nullptr) {
    return handle;
  }
  void* handle = posix::open_library("libcrypto.so.1.1", "libssl1.1", why);
  if (handle == nullptr) {
    why = why_3 + "; " + why;
  }
  return handle;
}

bool bind_crypto(Crypto& c, std::string& why) {
  void* handle = open_crypto(why);
  auto sym = [handle, &why](auto& fn, const char* name) {
    return posix::load_symbol(handle, fn, name, why, "libcrypto");
  };
  return handle != nullptr && sym(c.HMAC, "HMAC") && sym(c.EVP_sha256, "EVP_sha256") &&
         sym(c.CRYPTO_memcmp, "CRYPTO_memcmp") &&
         sym(c.EVP_PKEY_CTX_new_id, "EVP_PKEY_CTX_new_id") &&
         sym(c.EVP_PKEY_derive_init, "EVP_PKEY_derive_init") &&
         sym(c.EVP_PKEY_CTX_ctrl, "EVP_PKEY_CTX_ctrl") &&
         sym(c.EVP_PKEY_derive, "EVP_PKEY_derive") &&
         sym(c.EVP_PKEY_CTX_free, "EVP_PKEY_CTX_free") &&
         sym(c.OPENSSL_cleanse, "OPENSSL_cleanse") && sym(c.HMAC_CTX_new, "HMAC_CTX_new") &&
         sym(c.HMAC_CTX_free, "HMAC_CTX_free") && sym(c.HMAC_Init_ex, "HMAC_Init_ex") &&
         sym(c.HMAC_Update, "HMAC_Update") && sym(c.HMAC_Final, "HMAC_Final");
}

// Loaded once, by whichever thread first needs it; throws
// std::runtime_error, naming the packages, where libcrypto is missing.
const Crypto& lib() {
  static const Crypto crypto = [] {
    Crypto c{};
    std::string why;
    if (!bind_crypto(c, why)) {
      throw std::runtime_error("the store's authentication needs OpenSSL's libcrypto 3 or 1.1: " +
                               why);
    }
    return c;
  }();
  return crypto;
}

std::string hmac(std::string_view token, std::string_view label, std::string_view first,
                 std::string_view second) {
  std::string message;
  message.reserve(label.size() + first.size() + second.size());
  message.append(label).append(first).append(second);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const Crypto& c = lib();
  if (c.HMAC(c.EVP_sha256(), token.data(), static_cast<int>(token.size()),
             reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
             &len) == nullptr) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

}  // namespace

std::string random_nonce() {
  // The kernel's CSPRNG (as OpenSSL's own generator is seeded): a store or
  // client without a token never loads libcrypto. Up to 256 bytes are read
  // whole, never cut by a signal.
  std::string nonce(k_nonce_bytes, '\0');
  if (::getrandom(nonce.data(), nonce.size(), 0) != static_cast<ssize_t>(nonce.size())) {
    throw std::runtime_error("no random bytes for the store's handshake: " +
                             std::string(std::strerror(errno)));
  }
  return nonce;
}

std::string server_proof(std::string_view token, std::string_view client_nonce,
                         std::string_view server_nonce) {
  return hmac(token, "ddplaunch store server", client_nonce, server_nonce);
}

std::string client_proof(std::string_view token, std::string_view client_nonce,
                         std::string_view server_nonce) {
  return hmac(token, "ddplaunch store client", server_nonce, client_nonce);
}

std::string worker_token(std::string_view job_token) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : hmac(job_token, "ddplaunch worker credential", "", "")) {
    out += k_hex[c >> 4];
    out += k_hex[c & 15];
  }
  return out;
}

bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && lib().CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

// A worker's own keys, and `ddplaunch status`'s (which the workers'
// credential may ask for; docs/SECURITY.md).
bool workers_key(std::string_view key) {
  return key.starts_with(k_worker_prefix) || key.starts_with("status/");
}

// rdzv/plan, or job/<digits>/stop.
bool readable_job_key(std::string_view key) {
  if (key == "rdzv/plan") {
    return true;
  }
  if (!key.starts_with("job/") || !key.ends_with("/stop")) {
    return false;
  }
  const std::string_view round = key.substr(4, key.size() - 4 - 5);
  return !round.empty() && round.find_first_not_of("0123456789") == std::string_view::npos;
}

std::string refusal(std::string_view what, std::string_view key) {
  return "the workers' credential may not " + std::string(what) + " " + std::string(key) +
         ": a worker's keys live under " + std::string(k_worker_prefix) +
         " (docs/SECURITY.md; is an agent given the workers' DDPLAUNCH_STORE_TOKEN as its job "
         "token?)";
}

}  // namespace

std::string worker_refusal(const protocol::Request& r) {
  using protocol::Op;
  switch (r.op) {
    case Op::k_set:
    case Op::k_add:
    case Op::k_cas:
    case Op::k_delete:
      return workers_key(r.key) ? "" : refusal("write", r.key);
    case Op::k_on_close:
      return r.key.empty() || workers_key(r.key) ? "" : refusal("write", r.key);
    case Op::k_get:
      return workers_key(r.key) || readable_job_key(r.key) ? "" : refusal("read", r.key);
    case Op::k_wait:
    case Op::k_check:
    case Op::k_multi_get:
      for (const std::string& key : r.keys) {
        if (!workers_key(key) && !readable_job_key(key)) {
          return refusal("read", key);
        }
      }
      return "";
    case Op::k_keys:
      return workers_key(r.key) ? "" : refusal("list keys under", r.key.empty() ? "\"\"" : r.key);
    case Op::k_num_keys:
    case Op::k_ping:
    case Op::k_unwatch:  // its own parked requests only
    case Op::k_hello:
    case Op::k_auth:
      return "";
  }
  return "the workers' credential may not make this request";
}

SessionKeys session_keys(std::string_view credential, std::string_view client_nonce,
                         std::string_view server_nonce) {
  const std::string salt = std::string(client_nonce) + std::string(server_nonce);
  static constexpr char k_info[] = "ddplaunch store session v6";
  unsigned char out[64];
  size_t len = sizeof(out);
  const Crypto& c = lib();
  EVP_PKEY_CTX* ctx = c.EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  // HKDF's parameters as 1.1 sets them (its EVP_PKEY_CTX_set_hkdf_md() and
  // the others are these calls, as macros); 3 takes them the same way. The
  // operation is -1 (any): EVP_PKEY_OP_DERIVE's value differs between the two.
  auto set = [&c, ctx](int what, int size, void* value) {
    return c.EVP_PKEY_CTX_ctrl(ctx, -1, -1, what, size, value) > 0;
  };
  auto bytes_of = [](std::string_view text) {
    return const_cast<char*>(text.data());  // (only read)
  };
  const bool ok =
      ctx != nullptr && c.EVP_PKEY_derive_init(ctx) > 0 &&
      set(EVP_PKEY_CTRL_HKDF_MD, 0, const_cast<EVP_MD*>(c.EVP_sha256())) &&
      set(EVP_PKEY_CTRL_HKDF_SALT, static_cast<int>(salt.size()), bytes_of(salt)) &&
      set(EVP_PKEY_CTRL_HKDF_KEY, static_cast<int>(credential.size()), bytes_of(credential)) &&
      set(EVP_PKEY_CTRL_HKDF_INFO, static_cast<int>(sizeof(k_info) - 1), bytes_of(k_info)) &&
      c.EVP_PKEY_derive(ctx, out, &len) > 0 && len == sizeof(out);
  c.EVP_PKEY_CTX_free(ctx);
  if (!ok) {
    throw std::runtime_error("HKDF-SHA256 failed");
  }
  const auto* bytes = reinterpret_cast<const char*>(out);
  SessionKeys keys{std::string(bytes, 32), std::string(bytes + 32, 32)};
  c.OPENSSL_cleanse(out, sizeof(out));
  return keys;
}

FrameMac::FrameMac(std::string_view key) {
  const Crypto& c = lib();
  HMAC_CTX* ctx = c.HMAC_CTX_new();
  if (ctx == nullptr ||
      c.HMAC_Init_ex(ctx, key.data(), static_cast<int>(key.size()), c.EVP_sha256(), nullptr) != 1) {
    c.HMAC_CTX_free(ctx);
    throw std::runtime_error("HMAC-SHA256 setup failed");
  }
  m_ctx = ctx;
}

FrameMac::~FrameMac() {
  if (m_ctx != nullptr) {  // (then libcrypto is loaded)
    lib().HMAC_CTX_free(static_cast<HMAC_CTX*>(m_ctx));
  }
}

FrameMac::FrameMac(FrameMac&& other) noexcept
    : m_ctx(std::exchange(other.m_ctx, nullptr)), m_seq(other.m_seq) {}

FrameMac& FrameMac::operator=(FrameMac&& other) noexcept {
  if (this != &other) {
    if (m_ctx != nullptr) {
      lib().HMAC_CTX_free(static_cast<HMAC_CTX*>(m_ctx));
    }
    m_ctx = std::exchange(other.m_ctx, nullptr);
    m_seq = other.m_seq;
  }
  return *this;
}

std::string FrameMac::tag(std::string_view body) {
  auto* ctx = static_cast<HMAC_CTX*>(m_ctx);
  unsigned char seq[8];
  for (int i = 0; i < 8; ++i) {
    seq[i] = static_cast<unsigned char>(m_seq >> (56 - 8 * i));
  }
  ++m_seq;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // No key and no digest: the context starts again with the key it holds.
  const Crypto& c = lib();
  if (c.HMAC_Init_ex(ctx, nullptr, 0, nullptr, nullptr) != 1 ||
      c.HMAC_Update(ctx, seq, sizeof(seq)) != 1 ||
      c.HMAC_Update(ctx, reinterpret_cast<const unsigned char*>(body.data()), body.size()) != 1 ||
      c.HMAC_Final(ctx, out, &len) != 1 || len < k_tag_bytes) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(out), k_tag_bytes);
}

void FrameMac::seal(std::string_view frames, std::string& sealed) {
  size_t at = 0;
  while (frames.size() - at >= 4) {
    uint32_t len = 0;
    for (size_t i = 0; i < 4; ++i) {
      len = (len << 8) | static_cast<unsigned char>(frames[at + i]);
    }
    const std::string_view body = frames.substr(at + 4, len);
    const uint32_t sealed_len = len + static_cast<uint32_t>(k_tag_bytes);
    for (int i = 0; i < 4; ++i) {
      sealed += static_cast<char>((sealed_len >> (24 - 8 * i)) & 0xff);
    }
    sealed.append(body).append(tag(body));
    at += 4 + body.size();
  }
}

bool FrameMac::open(std::string_view body, std::string_view& payload) {
  if (body.size() < k_tag_bytes) {
    return false;
  }
  payload = body.substr(0, body.size() - k_tag_bytes);
  return same_proof(tag(payload), body.substr(payload.size()));
}

}  // namespace ddplaunch::auth
