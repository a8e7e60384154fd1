// UTF-8 to code points and back (RFC 3629): strict, so that a corpus that is not UTF-8 is found and
// named instead of becoming a vocabulary of stray bytes.
#include <fmt/format.h>

#include "kestrel/error.h"
#include "kestrel/text.h"

namespace kestrel::data {

std::vector<char32_t> decode_utf8(std::string_view text, const std::string& what) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char lead = bytes[i];
    int length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
    char32_t c = length == 1 ? lead : length == 2 ? lead & 0x1F : length == 3 ? lead & 0x0F : lead & 0x07;
    bool valid = length > 0 && i + length <= n;
    for (int k = 1; valid && k < length; ++k) {
      valid = (bytes[i + k] & 0xC0) == 0x80;
      c = (c << 6) | (bytes[i + k] & 0x3F);
    }
    // The shortest form only, no UTF-16 surrogates, nothing past U+10FFFF.
    static constexpr char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (!valid || c < smallest[length] || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF)
      throw InvalidArgument(fmt::format("{}: not UTF-8 at byte {} (0x{:02x}); convert it to UTF-8 (iconv), leave it "
                                        "out, or use the byte tokenizer",
                                        what, i, lead));
    out.push_back(c);
    i += static_cast<size_t>(length);
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace kestrel::data
