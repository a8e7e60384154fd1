// Checkpoint file IO: crash-safe writes, the safetensors format, and SHA-256 fingerprints.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/device.h"
#include "kestrel/dtype.h"
#include "kestrel/error.h"
#include "kestrel/tensor.h"

namespace kestrel::io {

// Writes `bytes` to `path` atomically: a temporary file in the same folder (path + ".tmp-<pid>-<nonce>-<n>"),
// written, flushed and fsync'ed, then renamed over `path`, then the folder fsync'ed. A crash leaves either
// the old file or the new one, never a torn file, and no temporary is left behind on failure. Creates
// missing parent folders. Throws kestrel::Error naming the path and the OS error on failure.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Removes the temporaries that write_file_atomically left in `folder` when its process was killed
// mid-write (a checkpoint's can be as large as the model); those of running processes are kept.
// A missing folder is fine.
void remove_stale_temporaries(const std::string& folder);

// The whole file. Only regular files are read (a FIFO would block and /dev/zero never end), and at most
// `max_bytes` of them. Throws kestrel::InvalidArgument naming the path when it is missing, unreadable,
// not a regular file or larger than that.
std::string read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX);

// The most a model file or run config may hold: far above any real one, far below a mistaken path.
inline constexpr uint64_t kMaxTextFileBytes = uint64_t(64) << 20;

// Throws InvalidArgument naming `what` and the path unless it names a regular file (or a link to one),
// for readers that open files themselves (IDX, CSV).
void check_regular_file(const std::string& path, const char* what);

// A host-side tensor: row-major, little-endian element bytes (data.size() == numel * dtype_size).
struct NamedTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::string data;
};

// The safetensors format (huggingface/safetensors): an 8-byte little-endian u64 N, then N bytes of JSON
//   {"__metadata__": {"k": "v"}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..}
// (offsets relative to the byte after the header), then the data. Dtype names: F32 F16 BF16 F64 I32 I64 U8.
// Tensors are laid out in name order; the header is padded with spaces to a multiple of 8 bytes, as the
// reference implementation does. Metadata values are strings. "__metadata__" is omitted when empty.
// Throws InvalidArgument for duplicate or reserved names and for data whose size does not fit the shape.
std::string encode_safetensors(const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in name order
  std::map<std::string, std::string> metadata;
  const NamedTensor* find(const std::string& name) const;  // nullptr when absent
};

// Validates everything: header length within the file, JSON syntax, each entry's dtype known, shape
// non-negative integers, offsets in range, end - begin == numel * dtype size, no overlaps or gaps, no
// duplicate names, metadata values strings. A problem throws kestrel::InvalidArgument
// ("<source>: corrupt safetensors file: <what>; <what to do>"); `source` names the file in messages.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& source);

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});  // atomically
SafetensorsFile load_safetensors(const std::string& path);

// Between device tensors and NamedTensor (through Tensor::copy_to_host / Tensor::from_host). Any view
// works: it is read back in logical row-major order.
NamedTensor to_named(const std::string& name, const Tensor& tensor);
Tensor to_tensor(const NamedTensor& named, const Device& device);

// SHA-256 (FIPS 180-4) of `bytes` as 64 lowercase hex digits; fingerprints model files.
std::string sha256_hex(std::string_view bytes);

}  // namespace kestrel::io
