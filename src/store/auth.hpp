// The store's job secret: HMAC-SHA256 challenge-response in both directions
// (OpenSSL's libcrypto; no hand-written crypto). Each side sends a fresh
// random nonce; the server proves it knows the token over both nonces, then
// the client does, with a different label so that neither proof can be
// reflected back. The token itself never crosses the wire. Pure apart from
// the random bytes; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ddplaunch::auth {

inline constexpr size_t k_nonce_bytes = 32;
inline constexpr size_t k_proof_bytes = 32;  // SHA-256

// k_nonce_bytes from the system's CSPRNG. Throws std::runtime_error.
std::string random_nonce();

std::string server_proof(std::string_view token, std::string_view client_nonce,
                         std::string_view server_nonce);
std::string client_proof(std::string_view token, std::string_view client_nonce,
                         std::string_view server_nonce);

// The workers' credential for a store whose job token is `job_token`: every
// node derives the same one, and it does not reveal the job token (64 hex
// characters of HMAC-SHA256). A store with both admits either.
std::string worker_token(std::string_view job_token);

// Constant-time comparison of two proofs.
bool same_proof(std::string_view a, std::string_view b);

}  // namespace ddplaunch::auth
