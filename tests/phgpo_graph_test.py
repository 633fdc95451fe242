"""Tests for phgpo/graph.py: edges, templates, errors, and agreement with the authors' graph."""

import collections
import json
import os
import re

import numpy as np
from absl.testing import absltest
import pytest

from phgpo import graph

pytestmark = pytest.mark.fast   # the everyday tier: pure functions, no processes

_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
_TRAJECT = os.path.join(_DATA, "traject_bench")
_AUTHORS_GRAPH = os.path.join(_DATA, "phgpo_graphs", "traject_bench", "mcp_rl_graph.json")

TOOLS = ["search", "fetch", "summarise", "unused"]
TRAJS = [
    [("search", ("q",)), ("fetch", ("url",)), ("fetch", ("url",)), ("summarise", ())],
    [("search", ["q", "lang"]), ("summarise", ())],
    [("fetch", ("id",)), ("search", ("lang", "q"))],
]


def _load_traject_bench():
  """(tool names in first-call order, trajectories) from TRAJECT-Bench's sequential split."""
  trajs = []
  for domain in sorted(os.listdir(os.path.join(_TRAJECT, "sequential"))):
    with open(os.path.join(_TRAJECT, "sequential", domain, "traj_query.json")) as f:
      for query in json.load(f):
        trajs.append([
            (c["tool name"], [p["name"] for p in c["required parameters"] + c["optional parameters"]])
            for c in query["tool list"]])
  names = list(dict.fromkeys(name for t in trajs for name, _ in t))
  return names, trajs


class SmallGraphTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.g = graph.build_tool_graph(TOOLS, TRAJS, fallback_templates={"unused": ["b", "a"]})

  def test_edge_counts_and_start_row(self):
    g = self.g
    self.assertEqual((g.num_tools, g.start_index), (4, 4))
    expected = np.zeros((5, 4), np.int32)
    for s, d in [(4, 0), (0, 1), (1, 1), (1, 2), (4, 0), (0, 2), (4, 1), (1, 0)]:
      expected[s, d] += 1
    np.testing.assert_array_equal(g.edge_counts, expected)
    self.assertEqual(g.edge_counts.dtype, np.int32)
    np.testing.assert_array_equal(g.edge_mask, expected > 0)
    self.assertEqual(g.edge_counts[g.start_index, g.tool_index("search")], 2)

  def test_all_edges_mode(self):
    g = graph.build_tool_graph(TOOLS, TRAJS, edges="all")
    self.assertTrue(g.edge_mask.all())
    self.assertEqual(g.edge_mask.shape, (5, 4))
    np.testing.assert_array_equal(g.edge_counts, self.g.edge_counts)

  def test_templates_ranked_by_frequency_then_first_appearance(self):
    g = self.g
    # search: ('lang','q') twice (key order and duplicates ignored), ('q',) once.
    self.assertEqual(g.templates[0], (("lang", "q"), ("q",)))
    # fetch: ('url',) twice, ('id',) once.
    self.assertEqual(g.templates[1], (("url",), ("id",)))
    self.assertEqual(g.templates[2], ((),))
    self.assertEqual(g.templates[3], (("a", "b"),))  # fallback, sorted
    np.testing.assert_array_equal(g.template_counts, [[2, 1], [2, 1], [2, 0], [0, 0]])
    np.testing.assert_array_equal(g.template_mask,
                                  [[True, True], [True, True], [True, False], [True, False]])
    self.assertEqual(g.template_index(0, ["q", "lang"]), 0)
    self.assertEqual(g.template_index(0, ("q",)), 1)
    self.assertEqual(g.template_index(0, ("x",)), -1)

  def test_tie_broken_by_first_appearance(self):
    g = graph.build_tool_graph(["t"], [[("t", ("b",)), ("t", ("a",)), ("t", ("a",)), ("t", ("b",))]])
    self.assertEqual(g.templates[0], (("b",), ("a",)))

  def test_max_templates_truncates(self):
    trajs = [[("t", (k,))] * (5 - i) for i, k in enumerate("abcde")]
    g = graph.build_tool_graph(["t"], trajs, max_templates=2)
    self.assertEqual(g.templates[0], (("a",), ("b",)))
    self.assertEqual(g.num_templates, 2)
    self.assertEqual(g.template_index(0, ("c",)), -1)

  def test_unused_tool_without_fallback_gets_empty_template(self):
    g = graph.build_tool_graph(TOOLS, TRAJS)
    self.assertEqual(g.templates[3], ((),))
    self.assertEqual(g.template_index(3, ()), 0)

  def test_tool_index_errors_suggest_close_names(self):
    self.assertEqual(self.g.tool_index("fetch"), 1)
    self.assertEqual(self.g.tool_index(graph.START), 4)
    with self.assertRaisesRegex(KeyError, "Unknown tool 'serch'.*'search'"):
      self.g.tool_index("serch")
    with self.assertRaisesRegex(KeyError, "trajectory 0, call 1: unknown tool 'fetsh'.*'fetch'"):
      graph.build_tool_graph(TOOLS, [[("search", ()), ("fetsh", ())]])
    with self.assertRaisesRegex(KeyError, "fallback_templates: unknown tool"):
      graph.build_tool_graph(TOOLS, TRAJS, fallback_templates={"nope": ()})

  def test_bad_input_errors(self):
    with self.assertRaisesRegex(TypeError, "pass \\('q',\\)"):
      graph.build_tool_graph(TOOLS, [[("search", "q")]])
    with self.assertRaisesRegex(ValueError, "unique"):
      graph.build_tool_graph(["a", "a"], [])
    with self.assertRaisesRegex(ValueError, "graph.edges"):
      graph.build_tool_graph(TOOLS, TRAJS, edges="some")
    with self.assertRaisesRegex(ValueError, "max_templates"):
      graph.build_tool_graph(TOOLS, TRAJS, max_templates=0)
    with self.assertRaisesRegex(ValueError, "empty"):
      graph.build_tool_graph([], [])
    with self.assertRaisesRegex(IndexError, "out of range"):
      self.g.template_index(4, ())

  def test_to_networkx(self):
    nxg = self.g.to_networkx()
    self.assertEqual(nxg.number_of_nodes(), 5)
    self.assertEqual(nxg.number_of_edges(), int(self.g.edge_mask.sum()))
    self.assertEqual(nxg.edges[graph.START, "search"]["count"], 2)
    self.assertEqual(nxg.edges["fetch", "fetch"]["count"], 1)
    self.assertEqual(nxg.nodes["search"]["templates"], [("lang", "q"), ("q",)])
    self.assertEqual(nxg.nodes["search"]["template_counts"], [2, 1])
    self.assertEqual(nxg.in_degree(graph.START), 0)

  def test_encode_trajectories(self):
    tools, templates, lengths = self.g.encode_trajectories(TRAJS, horizon=3)
    np.testing.assert_array_equal(tools, [[0, 1, 1], [0, 2, -1], [1, 0, -1]])
    np.testing.assert_array_equal(templates, [[1, 0, 0], [0, 0, -1], [1, 0, -1]])
    np.testing.assert_array_equal(lengths, [3, 2, 2])
    self.assertEqual(tools.dtype, np.int32)


@absltest.skipUnless(os.path.exists(_AUTHORS_GRAPH) and os.path.isdir(_TRAJECT),
                     "TRAJECT-Bench data or the authors' graph not found")
class AuthorsGraphAgreementTest(absltest.TestCase):
  """Our graph from TRAJECT-Bench's gold trajectories vs the authors' mcp_rl_graph.json."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.names, cls.trajs = _load_traject_bench()
    cls.g = graph.build_tool_graph(cls.names, cls.trajs, max_templates=64)
    with open(_AUTHORS_GRAPH) as f:
      cls.authors = json.load(f)["tools"]

  def test_same_tools(self):
    self.assertEqual(set(self.names), {t["original_name"] for t in self.authors})
    self.assertLen(self.names, 381)

  def test_same_edges_and_counts(self):
    # The authors store each tool's successor counts on every argument variant of the tool.
    theirs = {}
    for t in self.authors:
      for nxt, count in t["next_tools"].items():
        theirs.setdefault((t["original_name"], nxt), count)
        self.assertEqual(theirs[(t["original_name"], nxt)], count)
    g = self.g
    ours = {(g.tool_names[s], g.tool_names[d]): int(g.edge_counts[s, d])
            for s, d in zip(*np.nonzero(g.edge_counts[:g.num_tools]))}
    self.assertLen(theirs, 801)
    self.assertEqual(ours, theirs)
    # START edges: one per trajectory; the authors' graph has no START node.
    self.assertEqual(int(g.edge_counts[g.start_index].sum()), len(self.trajs))

  def test_same_templates_in_rank_order(self):
    by_tool = collections.defaultdict(list)
    for t in self.authors:
      m = re.search(r"_v(\d+)$", t["name"])
      rank = int(m.group(1)) if (m and t["name"] != t["original_name"]) else 0
      by_tool[t["original_name"]].append((rank, tuple(sorted(t["actual_keys"])), t["call_count"]))
    for name, variants in by_tool.items():
      variants.sort()
      i = self.g.tool_index(name)
      self.assertEqual(self.g.templates[i], tuple(v[1] for v in variants), name)
      k = len(variants)
      np.testing.assert_array_equal(self.g.template_counts[i, :k], [v[2] for v in variants])
    self.assertEqual(int(self.g.template_mask.sum()), len(self.authors))  # 715 (tool, template)

  def test_default_max_templates_keeps_most_calls(self):
    g8 = graph.build_tool_graph(self.names, self.trajs)
    self.assertEqual(g8.num_templates, 8)
    kept = g8.template_counts.sum() / self.g.template_counts.sum()
    self.assertGreater(kept, 0.95)


if __name__ == "__main__":
  absltest.main()
