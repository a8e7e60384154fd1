// JSON text as every Kestrel reader takes it: model files, run configs, checkpoint state, safetensors
// headers. Engine-internal.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kestrel::io {

// Deeper than any real document, shallow enough that code walking a value recursively (nlohmann's
// dump() in an error message, for one) cannot run out of stack.
inline constexpr int kMaxJsonDepth = 64;

// "line L, column C" of byte `byte` of `text`, for messages.
std::string text_position(std::string_view text, size_t byte);

// Parses `text`, refusing what nlohmann would take silently or crash on: nesting deeper than
// kMaxJsonDepth, and a key given twice in one object (nlohmann keeps the last). Throws
// InvalidArgument "<source>: invalid JSON at line L, column C: <what>" or
// "<source>: <json path>: the key 'k' appears twice in one object".
nlohmann::json parse_json(std::string_view text, const std::string& source);

// `key` of object `j` as a count, or 0 where it is absent, not a number, negative or past int64 (a file
// edited by hand): for fields read to show, not to trust.
int64_t count_or_zero(const nlohmann::json& j, const char* key);

}  // namespace kestrel::io
