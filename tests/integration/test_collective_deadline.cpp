// A communicator whose peer never joins, on one device (issue 17's abort path, which one GPU can show):
// rank 0 of a world of two, alone. Its first collective fails with PEER_FAILED once the timeout the host
// set after creating it has passed (not the plugin's default of minutes), and the communicator is torn
// down at once after that. For plugins whose collectives join through an id of their own (the CUDA
// plugin's NCCL); those whose transport is MPI (id "mpi") check the launcher's world instead, and their
// faults are tested under mpirun (test_data_parallel, mpi_transport_faults).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "kestrel/engine.h"
#include "kestrel/plugin.h"
#include "kestrel/plugin_struct_size.hpp"
#include "../plugin_tables.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(CollectiveDeadline, APeerThatNeverJoinsFailsTheFirstCollectiveAtTheTimeout) {
  int tested = 0;
  for (const kestrel_plugin_api* api : kestrel_test::loaded_plugin_tables()) {
    if (!api->comm_create) continue;
    char id[128] = {};
    ASSERT_EQ(api->comm_unique_id(id, sizeof id), KESTREL_STATUS_OK) << api->name << ": " << api->last_error();
    if (std::string(id) == "mpi") continue;
    SCOPED_TRACE(api->name);
    ++tested;
    kestrel_context* context = nullptr;
    kestrel_stream* stream = nullptr;
    kestrel_buffer* buffer = nullptr;
    ASSERT_EQ(api->context_create(0, &context), KESTREL_STATUS_OK) << api->last_error();
    ASSERT_EQ(api->stream_create(context, &stream), KESTREL_STATUS_OK) << api->last_error();
    ASSERT_EQ(api->buffer_alloc(context, 4 * 1024, &buffer), KESTREL_STATUS_OK) << api->last_error();
    kestrel_tensor tensor = kestrel::abi_init<kestrel_tensor>();  // (1024,) f32
    tensor.buffer = buffer;
    tensor.dtype = KESTREL_DTYPE_F32;
    tensor.rank = 1;
    tensor.shape[0] = 1024;
    tensor.strides[0] = 1;

    const double timeout = 2.0;
    kestrel_comm* comm = nullptr;
    const Clock::time_point created = Clock::now();
    ASSERT_EQ(api->comm_create(context, id, 0, 2, &comm), KESTREL_STATUS_OK) << api->last_error();
    EXPECT_LT(seconds_since(created), 1.0) << "creating the communicator should not wait for the other rank";
    ASSERT_EQ(api->comm_set_timeout(comm, timeout), KESTREL_STATUS_OK) << api->last_error();
    EXPECT_EQ(api->comm_query(comm), KESTREL_STATUS_OK) << "a join under way is no failure yet";

    const Clock::time_point issued = Clock::now();
    const kestrel_status status = api->all_reduce_sum(comm, stream, &tensor);
    const double waited = seconds_since(issued);
    EXPECT_EQ(status, KESTREL_STATUS_PEER_FAILED);
    const std::string message = api->last_error();
    EXPECT_NE(message.find("joining"), std::string::npos) << message;
    EXPECT_GE(waited, timeout * 0.9);
    EXPECT_LT(waited, timeout + 1.0) << "the failure comes within the timeout + 1 s";
    EXPECT_EQ(api->comm_query(comm), KESTREL_STATUS_PEER_FAILED);

    const Clock::time_point torn_down = Clock::now();
    api->comm_destroy(comm);
    EXPECT_LT(seconds_since(torn_down), 1.0) << "the aborted communicator is released at once";
    api->buffer_free(buffer);
    api->stream_destroy(stream);
    api->context_destroy(context);
  }
  if (tested == 0) GTEST_SKIP() << "no loaded plugin joins its collectives through an id of its own (NCCL)";
}

}  // namespace
