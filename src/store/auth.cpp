#include "store/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace ddplaunch::auth {

namespace {

std::string hmac(std::string_view token, std::string_view label, std::string_view first,
                 std::string_view second) {
  std::string message;
  message.reserve(label.size() + first.size() + second.size());
  message.append(label).append(first).append(second);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
           &len) == nullptr) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

}  // namespace

std::string random_nonce() {
  std::string nonce(k_nonce_bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) !=
      1) {
    throw std::runtime_error("no random bytes for the store's handshake");
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
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ddplaunch::auth
