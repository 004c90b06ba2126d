// --metrics-port's live page, served by node 0 at /: one self-contained
// HTML document (no script or style from anywhere else), built from
// src/output/page/ (index.html with page.css and page.js inside), that reads
// /status.json (the job's status, as `ddplaunch status --json` prints it)
// and /events.json (the job's last events, docs/EVENTS.md) every second and
// draws the job, its nodes, its ranks as a grid coloured by state, and a
// timeline of rounds, failures and restarts. Pure.
#pragma once

#include <deque>
#include <string>
#include <string_view>

namespace ddplaunch {

inline constexpr size_t k_page_events = 500;  // the events the page's timeline keeps

std::string_view status_page_html();

// /events.json's body: a JSON array of `lines` (each one event's JSON line).
std::string events_json(const std::deque<std::string>& lines);

}  // namespace ddplaunch
