// Copies between the host and device buffers, and on the device. Host-to-device copies never touch
// the destination from the host: the bytes go into the open batch's upload space and a
// vkCmdCopyBuffer moves them in stream order, so the call returns at once and the caller may reuse its
// memory. Device-to-host copies are sync points: submit, wait, then read through the mapping (or a
// bounce buffer when device memory is not host-visible).
#include <algorithm>
#include <cstring>

#include "vk_common.hpp"

namespace kestrel_vk {

namespace {

constexpr uint64_t kMaxReadbackBytes = 64ull << 20;

void record_copy(kestrel_stream* stream, VkBuffer src, uint64_t src_offset, VkBuffer dst, uint64_t dst_offset,
                 uint64_t bytes) {
  VkBufferCopy region{src_offset, dst_offset, bytes};
  vkCmdCopyBuffer(record_command(stream), src, dst, 1, &region);
}

// The stream's bounce buffer for reads, grown to hold min(bytes, kMaxReadbackBytes); returns its size.
uint64_t ensure_readback(kestrel_stream* stream, uint64_t bytes) {
  const uint64_t want = std::min(std::max<uint64_t>(bytes, 1 << 20), kMaxReadbackBytes);
  if (!stream->readback || stream->readback->reserved < want) {
    destroy_host_buffer(stream->readback);  // only used inside copy_to_host, which waits for its copies
    stream->readback = nullptr;
    stream->readback = allocate_host_buffer(stream->context, want);
  }
  return stream->readback->reserved;
}

}  // namespace

void copy_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t offset, const void* src, uint64_t bytes) {
  for (uint64_t done = 0; done < bytes;) {
    const UploadSpace space = reserve_upload(stream, bytes - done);
    std::memcpy(static_cast<char*>(space.buffer->mapped) + space.offset, static_cast<const char*>(src) + done,
                space.bytes);
    record_copy(stream, space.buffer->buffer, space.offset, dst->buffer, dst->offset + offset + done, space.bytes);
    done += space.bytes;
  }
}

void copy_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t offset, uint64_t bytes) {
  if (src->mapped) {
    synchronize(stream);
    std::memcpy(dst, static_cast<const char*>(src->mapped) + offset, bytes);
    return;
  }
  if (bytes == 0) {
    synchronize(stream);
    return;
  }
  const uint64_t chunk = ensure_readback(stream, bytes);
  for (uint64_t done = 0; done < bytes; done += chunk) {
    const uint64_t n = std::min(chunk, bytes - done);
    record_copy(stream, src->buffer, src->offset + offset + done, stream->readback->buffer, 0, n);
    synchronize(stream);
    std::memcpy(static_cast<char*>(dst) + done, stream->readback->mapped, n);
  }
}

void copy_on_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, kestrel_buffer* src,
                    uint64_t src_offset, uint64_t bytes) {
  if (bytes == 0) return;
  const bool overlap = dst == src && dst_offset < src_offset + bytes && src_offset < dst_offset + bytes;
  if (!overlap) {
    record_copy(stream, src->buffer, src->offset + src_offset, dst->buffer, dst->offset + dst_offset, bytes);
    return;
  }
  // vkCmdCopyBuffer forbids overlapping regions: memmove semantics go through the batch's upload space,
  // in chunks ordered so that no chunk overwrites source bytes not yet copied.
  const bool forward = dst_offset < src_offset;
  for (uint64_t done = 0; done < bytes;) {
    const UploadSpace scratch = reserve_upload(stream, bytes - done);
    const uint64_t n = scratch.bytes;
    const uint64_t at = forward ? done : bytes - done - n;
    record_copy(stream, src->buffer, src->offset + src_offset + at, scratch.buffer->buffer, scratch.offset, n);
    record_copy(stream, scratch.buffer->buffer, scratch.offset, dst->buffer, dst->offset + dst_offset + at, n);
    done += n;
  }
}

}  // namespace kestrel_vk
