// The JSON forms of what a run reports: a rank's outcome (the one encoding,
// also carried by the job/stop and job/result records of
// rendezvous/records.hpp), --summary-json, --dry-run and TORCHELASTIC_ERROR_FILE
// documents. Strings are made valid UTF-8 before encoding (invalid bytes become
// U+FFFD), so no byte a worker wrote can stop a report from being written.
// Reading checks every field; a malformed document is a RecordError, never a
// crash. Pure.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "env/launch_spec.hpp"
#include "supervise/summary.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// A JSON document (a store record, an outcome) that does not read.
class RecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One rank's outcome, and a node's list of them (job/result/<node>).
std::string encode_outcome(const RankOutcome& outcome);
RankOutcome decode_outcome(std::string_view text);
std::string encode_outcomes(const std::vector<RankOutcome>& outcomes);
std::vector<RankOutcome> decode_outcomes(std::string_view text);

// A TORCHELASTIC_ERROR_FILE as PyTorch's @record writes it:
// {"message": {"message": M, "extraInfo": {"py_callstack": T, "timestamp": S}}}
// (or "message" as a plain string). nullopt when it is not one; the message
// and traceback are cut to bounded sizes on character boundaries.
std::optional<WorkerError> decode_error_file(std::string_view text);
// The root cause's error as torchrun writes it to its own inherited
// TORCHELASTIC_ERROR_FILE: the rank's record with "errorCode" set.
std::string encode_error_file(const WorkerError& error, int error_code);

// --summary-json (ends with a newline).
std::string encode_summary(const JobSummary& summary);

// --dry-run (ends with a newline): the configuration with each value's source,
// the values that are placeholders until rendezvous, the topology as far as
// it is known, and every local rank's argv and environment.
std::string encode_dry_run(const Config& config, const LaunchSpec& plan, const Topology& topology);

}  // namespace ddplaunch
