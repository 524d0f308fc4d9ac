// The communicator seam without MPI (issue #13): the 1-rank communicator, the launch variables of
// torchrun / mpirun / SLURM, shard ownership, the rank-ordered reduction, and the TCP store that
// hands NCCL's unique id out (two threads on localhost). The MPI communicator and the strategies
// run under mpirun in tests/e2e/strategies_mpi.sh.
#include <gtest/gtest.h>

#include "train/recipe_table.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "dist/data_parallel.h"
#include "dist/peer_all_reduce.h"
#include "dist/reduce_order.h"
#include "leantrain/dist.h"
#include "leantrain/train.h"

namespace lt::dist {
namespace {

TEST(DistSingle, EveryCollectiveIsTheIdentity) {
  auto c = make_single_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> a = {1.5f, -2.0f, 3.25f}, b(3, 0.0f);
  c->all_reduce(a.data(), 3, DType::F32, ReduceOp::Avg);
  EXPECT_EQ(a, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  c->reduce_scatter(a.data(), b.data(), 3, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(b, a);
  std::vector<float> g(3, 0.0f);
  c->all_gather(a.data(), g.data(), 3, DType::F32);
  EXPECT_EQ(g, a);
  c->barrier();
  EXPECT_STREQ(world().name(), "single");  // the process's world before a run joins a job
}

// The copy-engine all-reduce takes large f32 / bf16 / f16 buffers only, and can be switched off.
// (Its data path needs two GPUs: bench/gpu_session.sh distn checks its losses against NCCL's.)
TEST(DistPeerReduce, TakesLargeFloatBuffersOnly) {
  EXPECT_TRUE(peer_reduce_takes(int64_t(25) << 20, DType::F32));
  EXPECT_TRUE(peer_reduce_takes(int64_t(1) << 20, DType::BF16));
  EXPECT_FALSE(peer_reduce_takes((int64_t(1) << 20) - 2, DType::F16));  // the per-step numbers stay on NCCL
  EXPECT_FALSE(peer_reduce_takes(int64_t(25) << 20, DType::I64));
  EXPECT_EQ(peer_chunk_bytes(), int64_t(16) << 20);
  ::setenv("LEANTRAIN_PEER_CHUNK_MB", "5000", 1);  // out of range: a usage error naming the knob
  EXPECT_THROW(peer_chunk_bytes(), UsageError);
  ::unsetenv("LEANTRAIN_PEER_CHUNK_MB");
  ::setenv("LEANTRAIN_PEER_REDUCE", "0", 1);
  EXPECT_FALSE(peer_reduce_takes(int64_t(25) << 20, DType::F32));
  EXPECT_EQ(peer_reduce_bytes(8), 0);
  ::unsetenv("LEANTRAIN_PEER_REDUCE");
  EXPECT_EQ(peer_reduce_bytes(1), 0);  // one rank reduces nothing
}

TEST(DistLaunch, ReadsTorchrunMpirunAndSlurmVariables) {
  std::map<std::string, std::string> none;
  EXPECT_EQ(launch_info(&none).world_size, 1);
  EXPECT_EQ(launch_info(&none).launcher, "none");

  std::map<std::string, std::string> torchrun = {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                                 {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};
  LaunchInfo t = launch_info(&torchrun);
  EXPECT_EQ(t.launcher, "env");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.master_addr, "10.0.0.1");
  EXPECT_EQ(t.master_port, 29500);

  std::map<std::string, std::string> mpi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
  LaunchInfo m = launch_info(&mpi);
  EXPECT_EQ(m.launcher, "mpirun");
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.world_size, 2);

  std::map<std::string, std::string> slurm = {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}};
  LaunchInfo s = launch_info(&slurm);
  EXPECT_EQ(s.launcher, "slurm");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
}

TEST(DistLaunch, RefusesBadVariablesWithOneLine) {
  std::map<std::string, std::string> bad = {{"RANK", "x"}, {"WORLD_SIZE", "2"}};
  EXPECT_THROW(launch_info(&bad), UsageError);
  std::map<std::string, std::string> outside = {{"RANK", "2"}, {"WORLD_SIZE", "2"}};
  try {
    launch_info(&outside);
    FAIL() << "rank 2 of 2 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 of a world of 2"), std::string::npos) << e.what();
  }
  std::map<std::string, std::string> port = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}};
  EXPECT_THROW(launch_info(&port), UsageError);
}

std::vector<Tensor> params_of_bytes(const std::vector<int64_t>& floats) {
  std::vector<Tensor> out;
  for (int64_t n : floats) out.push_back(Tensor::empty({n}, DType::F32));
  return out;
}

TEST(DistShards, OwnersAreContiguousAndBalancedByBytes) {
  auto equal = params_of_bytes(std::vector<int64_t>(10, 100));
  EXPECT_EQ(shard_owners(equal, 2), (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(shard_owners(equal, 1), std::vector<int>(10, 0));
  // A large parameter goes whole to the rank holding its middle byte; ranks may own nothing.
  auto skewed = params_of_bytes({10, 1000, 10, 10});
  EXPECT_EQ(shard_owners(skewed, 4), (std::vector<int>{0, 1, 3, 3}));
  for (int w : {2, 3, 5}) {
    auto o = shard_owners(equal, w);
    for (size_t i = 1; i < o.size(); ++i) EXPECT_LE(o[i - 1], o[i]) << "world " << w;
    EXPECT_EQ(o.back(), w - 1);
  }
}

TEST(DistShards, FsdpOwnsBlocksInTurnAndBalancesTheRest) {
  // An embedding, three blocks of two parameters, a head: blocks go to ranks 0, 1, 0; the
  // embedding to the rank holding least then (1), the head to the least after that (0).
  auto p = params_of_bytes({300, 100, 100, 100, 100, 100, 100, 300});
  const std::vector<int> unit_of = {-1, 0, 0, 1, 1, 2, 2, -1};
  EXPECT_EQ(interleaved_owners(p, unit_of, 2), (std::vector<int>{1, 0, 0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(interleaved_owners(p, unit_of, 1), std::vector<int>(8, 0));
  EXPECT_EQ(interleaved_owners(p, unit_of, 4), (std::vector<int>{3, 0, 0, 1, 1, 2, 2, 0}));
}

TEST(DistReduceOrder, SumsInRankOrderAndRoundsOnce) {
  // Three ranks' chunks of 2: 1e8 + 1 - 1e8 in f32 is 0 in rank order (1 is lost), which a
  // different order would not give: the order is the one stated.
  std::vector<float> parts = {1e8f, 2.0f, 1.0f, 4.0f, -1e8f, 6.0f};
  std::vector<float> out(2);
  detail::sum_in_rank_order(parts.data(), 2, 3, out.data(), 2, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 12.0f);
  detail::sum_in_rank_order(parts.data(), 2, 3, out.data(), 2, DType::F32, ReduceOp::Avg);
  EXPECT_EQ(out[1], 4.0f);
  // bf16: summed in f32, rounded once (1 + 1/256 + 1/256 = 1 + 1/128, exact in bf16).
  std::vector<uint16_t> h = {float_to_bf16(1.0f), float_to_bf16(1.0f / 256), float_to_bf16(1.0f / 256)};
  uint16_t r = 0;
  detail::sum_in_rank_order(h.data(), 1, 3, &r, 1, DType::BF16, ReduceOp::Sum);
  EXPECT_EQ(bf16_to_float(r), 1.0f + 1.0f / 128);
  EXPECT_THROW(detail::check_reducible(DType::I64), Error);
}

int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// Rank `rank` of a job of `world` ranks meeting at 127.0.0.1:`port`.
LaunchInfo local_rank_info(int rank, int world, int port) {
  LaunchInfo li;
  li.rank = rank;
  li.world_size = world;
  li.master_addr = "127.0.0.1";
  li.master_port = port;
  return li;
}

TEST(DistTcpStore, RankZeroHandsThePayloadToEveryRank) {
  const int port = free_port();
  auto info = [&](int rank) { return local_rank_info(rank, 3, port); };
  std::string got1, got2;
  std::thread r1([&] { got1 = tcp_store_exchange(info(1), "ignored"); });  // may start before rank 0 listens
  std::thread r2([&] { got2 = tcp_store_exchange(info(2), ""); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string id(128, '\x07');
  EXPECT_EQ(tcp_store_exchange(info(0), id), id);
  r1.join();
  r2.join();
  EXPECT_EQ(got1, id);
  EXPECT_EQ(got2, id);
}

// `train --devices N` opens rank 0's listening socket itself and hands it down
// (LEANTRAIN_STORE_FD), so no process can take the port between the choice and the listen (a
// rank's own connection attempts once did). Rank 0 serves on the inherited socket: the port is
// held by it the whole time, so binding it again fails, and the variable is consumed.
TEST(DistTcpStore, RankZeroServesOnAnInheritedListeningSocket) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(s, 16), 0);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  int other = ::socket(AF_INET, SOCK_STREAM, 0);  // the port is taken while rank 0 starts
  sockaddr_in b = a;
  b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(::bind(other, reinterpret_cast<sockaddr*>(&b), sizeof b), 0);
  ::close(other);
  ::setenv("LEANTRAIN_STORE_FD", std::to_string(s).c_str(), 1);
  auto info = [&](int rank) { return local_rank_info(rank, 2, port); };
  std::string got;
  std::thread r1([&] { got = tcp_store_exchange(info(1), ""); });
  const std::string id(128, '\x05');
  EXPECT_EQ(tcp_store_exchange(info(0), id), id);
  r1.join();
  EXPECT_EQ(got, id);
  EXPECT_EQ(std::getenv("LEANTRAIN_STORE_FD"), nullptr);
}

TEST(DistTcpStore, AMissingRankZeroIsAnErrorWithinTheTimeout) {
  set_timeout_seconds(1);  // --dist-timeout 1
  const LaunchInfo li = local_rank_info(1, 2, free_port());  // nobody listens there
  const auto t0 = std::chrono::steady_clock::now();
  try {
    tcp_store_exchange(li, "");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rendezvous at 127.0.0.1"), std::string::npos) << e.what();
  }
  set_timeout_seconds(RunConfig{}.dist_timeout);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(DistConfig, StrategyFlagsAreChecked) {
  RunConfig c;
  EXPECT_THROW(set_choice(*recipe_field("--strategy"), c, "zero4"), UsageError);
  set_choice(*recipe_field("--strategy"), c, "zero2");
  EXPECT_EQ(c.strategy, StrategyKind::Zero2);
  c.clip = 1.0;  // the shards' norms are combined before clipping
  EXPECT_NO_THROW(validate(c));
  c.fused_step = true;
  EXPECT_THROW(validate(c), UsageError);
  c.fused_step = false;
  c.devices = 0;
  EXPECT_THROW(validate(c), UsageError);
  c.devices = 2;
  c.strategy = StrategyKind::Fsdp;
  EXPECT_NO_THROW(validate(c));
}

}  // namespace
}  // namespace lt::dist
