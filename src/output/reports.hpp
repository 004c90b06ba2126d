// The reports a run leaves behind it: the --summary-json document and the
// root cause's error in an inherited TORCHELASTIC_ERROR_FILE (a scheduler's,
// or an outer torchrun's). They write files; a file that cannot be written is
// said once, never an error that changes the exit code, except
// check_summary_path(), which refuses a path before anything starts.
#pragma once

#include <optional>
#include <string>

#include "config/env_map.hpp"
#include "supervise/summary.hpp"

namespace ddplaunch {

// Throws UsageError for a --summary-json path that cannot be written (the
// summary would otherwise be lost at the very end). Empty: nothing to check.
void check_summary_path(const std::string& path);

// The file this node writes the job's summary to: --summary-json's `path`
// with every {node_rank} replaced by this node's rank (0 for a node that
// never had one); nullopt without a path.
std::optional<std::string> summary_path(const std::string& path, std::optional<int> node_rank);

// Writes the job's summary as JSON (docs/PROTOCOL.md's summary document)
// whole, through a temporary file renamed over `path`: a reader never sees
// half of it, nor two nodes' writes mixed. Every node of a job started by
// srun, or typed on a shared file system, may be given one path: node 0's
// summary (every rank) wins. With `keep_this_jobs` (another node than 0) a
// file at `path` written since `job_start` (seconds since the epoch), node
// 0's, is kept, and one that appears meanwhile is never replaced (link(2),
// not rename, puts it in place); a per-node path of the user's
// (`summary.{node_rank}.json`) is each node's own.
void write_summary_json(const std::string& path, const JobSummary& summary,
                        bool keep_this_jobs = false, double job_start = 0);

// An inherited TORCHELASTIC_ERROR_FILE (in `env`) receives the root cause's
// error, as torchrun's own @record writes it; with no error file from that
// rank, what ddplaunch knows of its end. Nothing for a success.
void write_inherited_error_file(const EnvMap& env, const JobSummary& summary);

}  // namespace ddplaunch
