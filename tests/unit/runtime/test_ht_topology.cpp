// runtime/ht/topology.h: nodes from host identities (consecutive blocks of equal size) or from
// the ANYEP_HT_RANKS_PER_NODE override; a layout the internode path cannot serve is refused with
// the rank that breaks it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/ht/topology.h"

using anyep::runtime::ht_ranks_per_node;

TEST(HtTopology, DetectsNodesFromHostIdentities) {
  EXPECT_EQ(ht_ranks_per_node({"a"}, 0), 1);
  EXPECT_EQ(ht_ranks_per_node({"a", "a", "a", "a"}, 0), 4);
  EXPECT_EQ(ht_ranks_per_node({"a", "a", "b", "b", "c", "c"}, 0), 2);
  EXPECT_EQ(ht_ranks_per_node({"a", "b", "c"}, 0), 1);
}

TEST(HtTopology, OverrideSplitsOneHostIntoEmulatedNodes) {
  EXPECT_EQ(ht_ranks_per_node({"a", "a", "a", "a"}, 1), 1);
  EXPECT_EQ(ht_ranks_per_node({"a", "a", "a", "a"}, 2), 2);
  EXPECT_THROW(ht_ranks_per_node({"a", "a", "a"}, 2), anyep::InvalidArgument);
}

TEST(HtTopology, RefusesUnequalOrInterleavedNodesNamingTheRank) {
  const std::vector<std::vector<std::string>> bad = {
      {"a", "a", "b"},       // unequal sizes
      {"a", "b", "a", "b"},  // interleaved
      {"a", "a", "b", "c"},  // second node split
      {"a", "b", "b", "a"},  // first node not consecutive
  };
  for (const auto& ids : bad) {
    try {
      ht_ranks_per_node(ids, 0);
      ADD_FAILURE() << "accepted a layout of " << ids.size() << " ranks it cannot serve";
    } catch (const anyep::Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("rank "), std::string::npos) << e.what();
    }
  }
}
