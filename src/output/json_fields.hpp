// The two habits every JSON document ddplaunch writes and reads shares (the
// store's records, the summary, the error files): text that is always
// written (invalid UTF-8 becomes U+FFFD), and integer fields read strictly.
// Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace ddplaunch {

// `j` as text (`indent` < 0: one line); never throws on invalid UTF-8.
std::string json_text(const nlohmann::json& j, int indent = -1);

// An integer field within int's range; anything else (4e19, which nlohmann
// would convert with undefined behaviour, "3", 2^40) throws RecordError.
int json_int(const nlohmann::json& j);

// The typed records' codecs (status/): fields read by name into a record's
// members, never trusting their types.
namespace json_fields {

// A field that may be absent (or null): left as it is then; of the wrong
// type: nlohmann::json::type_error, which the decoders turn into nullopt.
template <class T>
void read(const nlohmann::json& j, const char* key, T& field) {
  if (const auto it = j.find(key); it != j.end() && !it->is_null()) {
    it->get_to(field);
  }
}

template <class T>
void read(const nlohmann::json& j, const char* key, std::optional<T>& field) {
  if (const auto it = j.find(key); it != j.end() && !it->is_null()) {
    field = it->get<T>();
  }
}

// A string field must be a string: get_to would take a number as nothing else.
inline void read(const nlohmann::json& j, const char* key, std::string& field) {
  if (const auto it = j.find(key); it != j.end() && !it->is_null()) {
    if (!it->is_string()) {
      throw nlohmann::json::type_error::create(302, std::string(key) + " is not a string", nullptr);
    }
    field = it->get<std::string>();
  }
}

// A record is an object: anything else is not one (a forged answer).
inline void expect_object(const nlohmann::json& j, const char* what) {
  if (!j.is_object()) {
    throw nlohmann::json::type_error::create(302, std::string(what) + " is not an object", nullptr);
  }
}

template <class T>
void write(nlohmann::json& j, const char* key, const std::optional<T>& field) {
  if (field) {
    j[key] = *field;
  }
}

// A record of type T from its text (nlohmann's from_json for T); nullopt for
// text that is not an object or a field of the wrong type, never an exception.
template <class T>
std::optional<T> decode_record(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) {
    return std::nullopt;
  }
  try {
    return j.get<T>();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace json_fields

}  // namespace ddplaunch
