// Protocol Buffers' wire format, for the few messages Kestrel writes (TensorBoard's events): each
// function appends one field to a message being built. Engine-internal.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace kestrel::io::wire {

inline void varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

// Wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit.
inline void key(std::string& out, int field, int wire_type) { varint(out, (uint64_t(field) << 3) | uint64_t(wire_type)); }

inline void integer(std::string& out, int field, int64_t value) {
  key(out, field, 0);
  varint(out, static_cast<uint64_t>(value));  // negative int64s take ten bytes, as protobuf's do
}

template <class T, int WireType>
void fixed(std::string& out, int field, T value) {
  key(out, field, WireType);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts: the wire's byte order
  out.append(bytes, sizeof(T));
}
inline void float64(std::string& out, int field, double value) { fixed<double, 1>(out, field, value); }
inline void float32(std::string& out, int field, float value) { fixed<float, 5>(out, field, value); }

// A string, bytes, or an embedded message already encoded.
inline void bytes(std::string& out, int field, const std::string& value) {
  key(out, field, 2);
  varint(out, value.size());
  out += value;
}

}  // namespace kestrel::io::wire
