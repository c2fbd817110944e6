// Where the nodes of a multi-node group meet (parallel/rendezvous.h), over TCP on loopback: node 0 takes the
// nodes' and remote ranks' connections in any order and hands each its payload; a stray connection is
// ignored; a node with other settings, an id outside the group or a duplicate is refused on both sides,
// with the differing setting named.
#include "nanovllm/parallel/rendezvous.h"

#include <gtest/gtest.h>

#include <thread>

#include "support/expect_error.h"

namespace nanovllm {
namespace {

uint16_t free_port() { return Listener("127.0.0.1", 0).port(); }

ParallelConfig two_nodes(int64_t tp) {
  ParallelConfig p;
  p.tensor_parallel_size = tp;
  p.nnodes = 2;
  p.dist_init_addr = "127.0.0.1:" + std::to_string(free_port());
  return p;
}

TEST(Rendezvous, HostPortParsing) {
  EXPECT_EQ(parse_host_port("10.0.0.1:29500"), std::make_pair(std::string("10.0.0.1"), uint16_t{29500}));
  EXPECT_EQ(parse_host_port("node-a.cluster:1"), std::make_pair(std::string("node-a.cluster"), uint16_t{1}));
  EXPECT_EQ(parse_host_port("[::1]:80"), std::make_pair(std::string("::1"), uint16_t{80}));
  for (const char* bad : {"", "host", ":5", "host:", "host:0", "host:65536", "host:5x", "host:-1"})
    testing::expect_error([&] { parse_host_port(bad, "--dist-init-addr"); }, {"--dist-init-addr"});
}

TEST(Rendezvous, NodesAndRanksJoinInAnyOrderAndGetThePayload) {
  const ParallelConfig p = two_nodes(4);  // 2 ranks per node: node 1 and ranks 2, 3 connect
  HostedRendezvous rv;
  std::thread host([&] { rv = host_rendezvous(p, "fp", /*with_comm_ranks=*/true, "payload!"); });
  {
    Socket stray = connect_to("127.0.0.1", parse_host_port(p.dist_init_addr).second, std::chrono::seconds(5));
    stray.send_frame("not a hello");  // ignored, not fatal
  }
  auto [rank3, pay3] = join_rendezvous(p, PeerRole::kCommRank, 3, "fp");
  auto [node1, pay1] = join_rendezvous(p, PeerRole::kNode, 1, "fp");
  auto [rank2, pay2] = join_rendezvous(p, PeerRole::kCommRank, 2, "fp");
  host.join();
  EXPECT_EQ(pay1, "payload!");
  EXPECT_EQ(pay2, "payload!");
  EXPECT_EQ(pay3, "payload!");
  ASSERT_EQ(rv.nodes.size(), 1u);
  ASSERT_EQ(rv.comm_ranks.size(), 2u);
  // Each accepted socket is the one its peer holds: a frame crosses.
  node1.send_frame("n1");
  rank2.send_frame("r2");
  rank3.send_frame("r3");
  EXPECT_EQ(rv.nodes[0].recv_frame(), "n1");
  EXPECT_EQ(rv.comm_ranks[0].recv_frame(), "r2");
  EXPECT_EQ(rv.comm_ranks[1].recv_frame(), "r3");
}

TEST(Rendezvous, OtherSettingsOrIdsOutsideTheGroupAreRefusedOnBothSides) {
  struct Case {
    PeerRole role;
    int64_t id;
    std::string fingerprint, host_error, peer_error;
  };
  for (const Case& c : {Case{PeerRole::kNode, 1, "a=1;max_model_len=4096", "max_model_len=8192, the peer max_model_len=4096",
                             "its settings differ"},
                        Case{PeerRole::kNode, 2, "a=1;max_model_len=8192", "node 2 is outside this group", "node 2"},
                        Case{PeerRole::kCommRank, 1, "a=1;max_model_len=8192", "rank 1 is outside this group", "rank 1"}}) {
    const ParallelConfig p = two_nodes(4);
    std::string host_error;
    std::thread host([&] {
      try {
        host_rendezvous(p, "a=1;max_model_len=8192", true, "");
      } catch (const Error& e) {
        host_error = e.what();
      }
    });
    testing::expect_error([&] { join_rendezvous(p, c.role, c.id, c.fingerprint); },
                          {"node 0 (" + p.dist_init_addr + ") refused", c.peer_error});
    host.join();
    EXPECT_NE(host_error.find(c.host_error), std::string::npos) << host_error;
  }
}

TEST(Rendezvous, ANodeThatNeverComesTimesOut) {
  const ParallelConfig p = two_nodes(2);
  testing::expect_error([&] { host_rendezvous(p, "fp", false, "", std::chrono::milliseconds(300)); },
                        {"did not come to " + p.dist_init_addr, "--node-rank 1..1"});
  testing::expect_error([&] { join_rendezvous(p, PeerRole::kNode, 1, "fp", std::chrono::milliseconds(300)); },
                        {"cannot connect to 127.0.0.1:"});
}

TEST(Rendezvous, NodeRepliesRoundTrip) {
  const NodeReply r = decode_reply(encode_reply(NodeReply{false, "rank 3: out of memory", 17}));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "rank 3: out of memory");
  EXPECT_EQ(r.value, 17);
  testing::expect_error([] { decode_reply("x"); }, {"node reply: truncated"});
}

}  // namespace
}  // namespace nanovllm
