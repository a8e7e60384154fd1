// The safetensors checkpoint format: encoding, fully validating decoding, and the tensor conversions.
// Reference: https://github.com/huggingface/safetensors (format described in its README).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "kestrel/error.h"
#include "json_text.h"
#include "kestrel/io.h"

namespace kestrel::io {

namespace {

constexpr size_t kLengthFieldBytes = 8;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kDamagedAdvice =
    "the file is damaged or was not written as safetensors: re-save it, or restore it from a good copy";
constexpr const char* kDtypeAdvice =
    "Kestrel reads F32, F16, BF16, F64, I32, I64 and U8: convert the tensor to one of these before saving";

struct DtypeName {
  DType dtype;
  const char* name;
};
constexpr DtypeName kDtypeNames[] = {{DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
                                     {DType::f64, "F64"}, {DType::i32, "I32"}, {DType::i64, "I64"},
                                     {DType::u8, "U8"}};

const char* safetensors_dtype_name(DType dtype) {
  for (const DtypeName& entry : kDtypeNames)
    if (entry.dtype == dtype) return entry.name;
  throw InvalidArgument(fmt::format("no safetensors name for dtype code {}", static_cast<int>(dtype)));
}

std::optional<DType> parse_safetensors_dtype(const std::string& name) {
  for (const DtypeName& entry : kDtypeNames)
    if (name == entry.name) return entry.dtype;
  return std::nullopt;
}

// numel * dtype size, or nothing when that does not fit in 64 bits (a hostile header can ask for anything).
std::optional<uint64_t> byte_size(const Shape& shape, DType dtype) {
  uint64_t bytes = dtype_size(dtype);
  for (int64_t extent : shape) {
    if (extent == 0) return 0;
    if (bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(extent)) return std::nullopt;
    bytes *= static_cast<uint64_t>(extent);
  }
  return bytes;
}

// Every decoding problem reads the same way: which file, that it is corrupt, what is wrong, what to do.
[[noreturn]] void corrupt(const std::string& source, const std::string& what, const char* advice = kDamagedAdvice) {
  throw InvalidArgument(fmt::format("{}: corrupt safetensors file: {}; {}", source, what, advice));
}

nlohmann::json parse_header(std::string_view header, const std::string& source) {
  // parse_json refuses a key given twice (a tensor name twice would be ambiguous) and deep nesting.
  nlohmann::json parsed;
  try {
    parsed = parse_json(header, "header");
  } catch (const InvalidArgument& e) {
    corrupt(source, e.what());
  }
  if (!parsed.is_object()) corrupt(source, fmt::format("header is a JSON {}, not an object", parsed.type_name()));
  return parsed;
}

// A JSON number that is a whole number >= 0 and fits in int64 (shapes and offsets must be).
std::optional<int64_t> non_negative_integer(const nlohmann::json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  uint64_t number = value.get<uint64_t>();
  if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(number);
}

std::map<std::string, std::string> parse_metadata(const nlohmann::json& value, const std::string& source) {
  if (!value.is_object())
    corrupt(source, fmt::format("\"{}\" is a JSON {}, not an object", kMetadataKey, value.type_name()));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      corrupt(source, fmt::format("metadata value of '{}' is a JSON {}, not a string", key, item.type_name()));
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

// One tensor's header entry, checked on its own; how entries fit together is checked afterwards.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

Entry parse_entry(const std::string& name, const nlohmann::json& value, uint64_t data_size, const std::string& source) {
  if (!value.is_object())
    corrupt(source, fmt::format("entry of tensor '{}' is a JSON {}, not an object", name, value.type_name()));
  Entry entry{name, DType::f32, {}, 0, 0};

  auto dtype_field = value.find("dtype");
  if (dtype_field == value.end() || !dtype_field->is_string())
    corrupt(source, fmt::format("tensor '{}' has no \"dtype\" string", name));
  std::optional<DType> dtype = parse_safetensors_dtype(dtype_field->get<std::string>());
  if (!dtype)
    corrupt(source, fmt::format("tensor '{}' has unknown dtype '{}'", name, dtype_field->get<std::string>()),
            kDtypeAdvice);
  entry.dtype = *dtype;

  auto shape_field = value.find("shape");
  if (shape_field == value.end() || !shape_field->is_array())
    corrupt(source, fmt::format("tensor '{}' has no \"shape\" array", name));
  for (const nlohmann::json& extent : *shape_field) {
    std::optional<int64_t> number = non_negative_integer(extent);
    if (!number)
      corrupt(source, fmt::format("tensor '{}' has shape {}: extents must be non-negative integers", name,
                                  shape_field->dump()));
    entry.shape.push_back(*number);
  }

  auto offsets_field = value.find("data_offsets");
  if (offsets_field == value.end() || !offsets_field->is_array() || offsets_field->size() != 2)
    corrupt(source, fmt::format("tensor '{}' has no \"data_offsets\" array of two integers", name));
  std::optional<int64_t> begin = non_negative_integer((*offsets_field)[0]);
  std::optional<int64_t> end = non_negative_integer((*offsets_field)[1]);
  if (!begin || !end)
    corrupt(source, fmt::format("tensor '{}' has data_offsets {}: they must be non-negative integers", name,
                                offsets_field->dump()));
  entry.begin = static_cast<uint64_t>(*begin);
  entry.end = static_cast<uint64_t>(*end);
  if (entry.begin > entry.end)
    corrupt(source, fmt::format("tensor '{}' has data_offsets [{}, {}] that end before they begin", name, entry.begin,
                                entry.end));
  if (entry.end > data_size)
    corrupt(source, fmt::format("tensor '{}' has data_offsets [{}, {}] outside the {} data bytes", name, entry.begin,
                                entry.end, data_size));

  std::optional<uint64_t> expected = byte_size(entry.shape, entry.dtype);
  if (!expected || *expected != entry.end - entry.begin)
    corrupt(source, fmt::format("tensor '{}' spans {} bytes but shape {} of {} needs {}", name, entry.end - entry.begin,
                                shape_str(entry.shape), safetensors_dtype_name(entry.dtype),
                                expected ? fmt::to_string(*expected) : std::string("more than 2^64")));
  return entry;
}

// The data section must be tiled exactly: each byte belongs to one tensor, none is left over.
void check_layout(std::vector<const Entry*> entries, uint64_t data_size, const std::string& source) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (const Entry* entry : entries) {
    if (entry->begin < cursor)
      corrupt(source, fmt::format("tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))", previous->name,
                                  entry->name, previous->begin, previous->end, entry->begin, entry->end));
    if (entry->begin > cursor)
      corrupt(source,
              fmt::format("gap of {} unused data bytes before tensor '{}'", entry->begin - cursor, entry->name));
    cursor = entry->end;
    previous = entry;
  }
  if (cursor != data_size)
    corrupt(source, fmt::format("{} data bytes after the last tensor belong to no tensor", data_size - cursor));
}

uint64_t read_length_field(std::string_view bytes) {
  uint64_t length = 0;
  for (size_t i = 0; i < kLengthFieldBytes; ++i)
    length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return length;
}

void append_length_field(std::string& out, uint64_t length) {
  for (size_t i = 0; i < kLengthFieldBytes; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
}

}  // namespace

const NamedTensor* SafetensorsFile::find(const std::string& name) const {
  for (const NamedTensor& tensor : tensors)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

std::string encode_safetensors(const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<const NamedTensor*> ordered;
  for (const NamedTensor& tensor : tensors) ordered.push_back(&tensor);
  std::sort(ordered.begin(), ordered.end(),
            [](const NamedTensor* a, const NamedTensor* b) { return a->name < b->name; });

  // ordered_json keeps "__metadata__" first and the tensors in layout order, as the reference writer does.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < ordered.size(); ++i) {
    const NamedTensor& tensor = *ordered[i];
    if (tensor.name == kMetadataKey)
      throw InvalidArgument(
          fmt::format("encode_safetensors: '{}' is reserved for metadata; rename the tensor", kMetadataKey));
    if (i > 0 && ordered[i - 1]->name == tensor.name)
      throw InvalidArgument(
          fmt::format("encode_safetensors: two tensors are named '{}'; give each a unique name", tensor.name));
    if (std::any_of(tensor.shape.begin(), tensor.shape.end(), [](int64_t extent) { return extent < 0; }))
      throw InvalidArgument(fmt::format("encode_safetensors: tensor '{}' has negative extent in shape {}", tensor.name,
                                        shape_str(tensor.shape)));
    std::optional<uint64_t> expected = byte_size(tensor.shape, tensor.dtype);
    if (!expected || *expected != tensor.data.size())
      throw InvalidArgument(fmt::format("encode_safetensors: tensor '{}' has {} data bytes but shape {} of {} needs {}",
                                        tensor.name, tensor.data.size(), shape_str(tensor.shape),
                                        dtype_name(tensor.dtype),
                                        expected ? fmt::to_string(*expected) : std::string("more than 2^64")));
    header[tensor.name] = {{"dtype", safetensors_dtype_name(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.data.size()}}};
    offset += tensor.data.size();
  }

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(
        fmt::format("encode_safetensors: tensor names and metadata must be valid UTF-8 ({})", e.what()));
  }
  // Padding keeps the data section 8-byte aligned, so a memory-mapped reader can view it in place.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(kLengthFieldBytes + header_text.size() + offset);
  append_length_field(out, header_text.size());
  out += header_text;
  for (const NamedTensor* tensor : ordered) out += tensor->data;
  return out;
}

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& source) {
  if (bytes.size() < kLengthFieldBytes)
    corrupt(source, fmt::format("the file is {} bytes, too short for the 8-byte header length", bytes.size()));
  uint64_t header_length = read_length_field(bytes);
  if (header_length > bytes.size() - kLengthFieldBytes)
    corrupt(source, fmt::format("header length {} runs past the end of the {}-byte file, which is truncated",
                                header_length, bytes.size()));
  std::string_view header = bytes.substr(kLengthFieldBytes, header_length);
  std::string_view data = bytes.substr(kLengthFieldBytes + header_length);

  nlohmann::json parsed = parse_header(header, source);
  SafetensorsFile file;
  std::vector<Entry> entries;
  entries.reserve(parsed.size());
  for (const auto& [key, value] : parsed.items()) {  // std::map order: tensors come out sorted by name
    if (key == kMetadataKey)
      file.metadata = parse_metadata(value, source);
    else
      entries.push_back(parse_entry(key, value, data.size(), source));
  }
  std::vector<const Entry*> pointers;
  for (const Entry& entry : entries) pointers.push_back(&entry);
  check_layout(pointers, data.size(), source);

  file.tensors.reserve(entries.size());
  for (Entry& entry : entries)
    file.tensors.push_back(NamedTensor{std::move(entry.name), entry.dtype, std::move(entry.shape),
                                       std::string(data.substr(entry.begin, entry.end - entry.begin))});
  return file;
}

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, encode_safetensors(tensors, metadata));
}

SafetensorsFile load_safetensors(const std::string& path) { return decode_safetensors(read_file(path), path); }

NamedTensor to_named(const std::string& name, const Tensor& tensor) {
  if (!tensor.defined()) throw InvalidArgument(fmt::format("to_named('{}'): the tensor is undefined", name));
  NamedTensor named{name, tensor.dtype(), tensor.shape(), {}};
  named.data.resize(static_cast<size_t>(tensor.numel()) * dtype_size(tensor.dtype()));
  tensor.copy_to_host(named.data.data());
  return named;
}

Tensor to_tensor(const NamedTensor& named, const Device& device) {
  std::optional<uint64_t> expected;
  if (std::none_of(named.shape.begin(), named.shape.end(), [](int64_t extent) { return extent < 0; }))
    expected = byte_size(named.shape, named.dtype);
  if (!expected || *expected != named.data.size())
    throw InvalidArgument(fmt::format("to_tensor('{}'): {} data bytes do not fit shape {} of {}", named.name,
                                      named.data.size(), shape_str(named.shape), dtype_name(named.dtype)));
  return Tensor::from_host(named.data.data(), named.shape, named.dtype, device);
}

}  // namespace kestrel::io
