// The store's job secret: HMAC-SHA256 challenge-response in both directions
// (OpenSSL's libcrypto; no hand-written crypto). Each side sends a fresh
// random nonce; the server proves it knows the token over both nonces, then
// the client does, with a different label so that neither proof can be
// reflected back. The token itself never crosses the wire. libcrypto is
// loaded at the first use (posix/library), not at start. The proofs are
// functions of their inputs and the random bytes; a FrameMac keeps one
// direction's sequence number, so one thread uses it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "store/protocol.hpp"

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

// --- what each credential may do ---------------------------------------------------

// The workers' keys: everything the workers' credential may write.
inline constexpr std::string_view k_worker_prefix = "user/";

// Why the workers' credential may not make `request` (empty: it may). It
// reads and writes under k_worker_prefix, and reads the job's topology
// (rdzv/plan) and verdicts (job/<round>/stop); nothing else, so a worker can
// neither forge a verdict nor act as a node. The job's token may do anything.
std::string worker_refusal(const protocol::Request& request);

// --- the authenticated session that follows AUTH ---------------------------------

inline constexpr size_t k_tag_bytes = 16;  // HMAC-SHA256, truncated

// One key per direction, from HKDF-SHA256 (RFC 5869) of the credential the
// client proved, salted with both nonces: every connection has its own.
struct SessionKeys {
  std::string client_to_server;
  std::string server_to_client;
};
SessionKeys session_keys(std::string_view credential, std::string_view client_nonce,
                         std::string_view server_nonce);

// One direction of a session. Each frame (u32 length, body) is sealed with a
// tag, HMAC-SHA256(key, u64 sequence number || body) truncated to
// k_tag_bytes, appended to the body (the length counts it). The sequence
// number counts this direction's frames from 0 and is never sent: a frame
// changed, replayed, reordered, dropped or injected fails open(). Move-only;
// not thread-safe.
class FrameMac {
 public:
  explicit FrameMac(std::string_view key);
  ~FrameMac();
  FrameMac(FrameMac&& other) noexcept;
  FrameMac& operator=(FrameMac&& other) noexcept;
  FrameMac(const FrameMac&) = delete;
  FrameMac& operator=(const FrameMac&) = delete;

  // Appends every whole frame of `frames` (one or more, back to back) to
  // `out`, sealed: one copy, straight into the send buffer.
  void seal(std::string_view frames, std::string& out);
  // Checks a received frame's body (its tag at the end) against the next
  // sequence number; true and the body without its tag, or false.
  bool open(std::string_view body, std::string_view& payload);

 private:
  std::string tag(std::string_view body);
  void* m_ctx = nullptr;  // HMAC_CTX, keyed once
  uint64_t m_seq = 0;
};

}  // namespace ddplaunch::auth
