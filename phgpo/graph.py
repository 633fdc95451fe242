"""PhGPO's tool-transition graph: tool nodes, a START node, and per-tool argument templates.

The graph is built once, on the host, from the training trajectories; its dense NumPy arrays
(`edge_counts`, `edge_mask`, `template_counts`, `template_mask`) are what the jit-compiled
pheromone code consumes. `to_networkx()` gives the same graph as a `networkx.DiGraph` for
inspection, plotting and graph queries.

Source: PhGPO, arXiv:2602.13691, sec. "MCP-grounded tool-transition graph" (SPEC.md "PhGPO",
"Graph"). Checked against the authors' released graph for TRAJECT-Bench
(`phgpo_graphs/traject_bench/mcp_rl_graph.json`, see tests/phgpo_graph_test.py): the same 801
tool-to-tool edges with the same counts, and the same argument templates in the same rank order.
"""
from __future__ import annotations

import collections
import dataclasses
import difflib
from typing import Iterable, Mapping, Sequence

import networkx as nx
import numpy as np

START = "__START__"
EDGE_MODES = ("observed", "all")

# One call: (tool name, argument keys). A trajectory is a sequence of calls.
Call = tuple[str, Sequence[str]]


def _normalise_keys(arg_keys: Sequence[str], *, where: str) -> tuple[str, ...]:
  """Sorted, de-duplicated tuple of argument-key names; rejects a bare string."""
  if isinstance(arg_keys, (str, bytes)):
    raise TypeError(
        f"{where}: argument keys must be a sequence of key names, got the string {arg_keys!r}; "
        f"pass ({arg_keys!r},) for a single key.")
  keys = tuple(arg_keys)
  for k in keys:
    if not isinstance(k, str):
      raise TypeError(f"{where}: argument key {k!r} is a {type(k).__name__}, expected str.")
  return tuple(sorted(set(keys)))


@dataclasses.dataclass(frozen=True, eq=False)
class ToolGraph:
  """Tool-transition graph with argument templates, as dense host arrays.

  Node indices: tools are 0..N-1 in the order of `tool_names`; START is `start_index` = N and
  appears only as a source (row N of the edge arrays), never as a target.

  Attributes:
    tool_names: list[str], the N tool names (node order).
    edges: 'observed' or 'all', the mode the graph was built with (config `graph.edges`).
    edge_counts: i32[N+1, N], number of observed transitions prev -> next over all training
      trajectories (repeats counted); row N is START -> first call.
    edge_mask: bool[N+1, N], the graph's edges: `edge_counts > 0` for 'observed', all True
      (self-loops included: a tool may be called twice in a row) for 'all'.
    templates: list of N tuples; templates[i] holds tool i's argument templates, each a tuple
      of sorted argument-key names, ranked by call frequency (ties: first appearance in the
      trajectories), at most `max_templates` (config `graph.max_templates`). A tool never
      called has exactly one template, its fallback.
    template_counts: i32[N, Tm], calls of tool i with template t (0 for padding and fallbacks).
    template_mask: bool[N, Tm], True where templates[i][t] exists; Tm = max(1, longest list).
  """
  tool_names: list[str]
  edges: str
  edge_counts: np.ndarray
  edge_mask: np.ndarray
  templates: list[tuple[tuple[str, ...], ...]]
  template_counts: np.ndarray
  template_mask: np.ndarray
  _index: dict[str, int] = dataclasses.field(init=False, repr=False)
  _template_index: list[dict[tuple[str, ...], int]] = dataclasses.field(init=False, repr=False)

  def __post_init__(self):
    n = len(self.tool_names)
    if self.edge_counts.shape != (n + 1, n) or self.edge_mask.shape != (n + 1, n):
      raise ValueError(
          f"edge arrays must have shape (N+1, N) = {(n + 1, n)}; got edge_counts "
          f"{self.edge_counts.shape}, edge_mask {self.edge_mask.shape}.")
    if len(self.templates) != n:
      raise ValueError(f"templates must hold one entry per tool ({n}), got {len(self.templates)}.")
    tm = self.template_counts.shape[1] if self.template_counts.ndim == 2 else -1
    if self.template_counts.shape != (n, tm) or self.template_mask.shape != (n, tm):
      raise ValueError(
          f"template arrays must have shape (N, Tm); got template_counts "
          f"{self.template_counts.shape}, template_mask {self.template_mask.shape}.")
    object.__setattr__(self, "_index", {name: i for i, name in enumerate(self.tool_names)})
    object.__setattr__(self, "_template_index",
                       [{keys: t for t, keys in enumerate(ts)} for ts in self.templates])

  @property
  def num_tools(self) -> int:
    """N, the number of tool nodes (START excluded)."""
    return len(self.tool_names)

  @property
  def num_templates(self) -> int:
    """Tm, the padded template axis of `template_counts` / `template_mask`."""
    return int(self.template_counts.shape[1])

  @property
  def start_index(self) -> int:
    """Index of the START node: N (row N of the edge arrays)."""
    return len(self.tool_names)

  def tool_index(self, name: str) -> int:
    """Node index of a tool name; `START` ('__START__') maps to `start_index`.

    Raises:
      KeyError naming the unknown tool and up to three close names (difflib).
    """
    if name == START:
      return self.start_index
    try:
      return self._index[name]
    except KeyError:
      close = difflib.get_close_matches(str(name), self.tool_names, n=3, cutoff=0.6)
      hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
      raise KeyError(
          f"Unknown tool {name!r}: not among the graph's {self.num_tools} tools.{hint}") from None

  def template_index(self, tool_idx: int, arg_keys: Sequence[str]) -> int:
    """Rank of the template `sorted(set(arg_keys))` for tool `tool_idx`, or -1 if not kept.

    Raises:
      IndexError if tool_idx is not in [0, N); TypeError if arg_keys is a bare string.
    """
    if not 0 <= tool_idx < self.num_tools:
      raise IndexError(f"tool_idx {tool_idx} out of range [0, {self.num_tools}).")
    keys = _normalise_keys(arg_keys, where="template_index")
    return self._template_index[tool_idx].get(keys, -1)

  def encode_trajectories(self, trajectories: Sequence[Sequence[Call]], *,
                          horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Padded index arrays for a batch of trajectories, cut to `horizon` calls.

    Args:
      trajectories: B sequences of (tool_name, arg_keys).
      horizon: H, the padded length; longer trajectories are truncated.
    Returns:
      tools i32[B, H] (-1 padding), templates i32[B, H] (-1 padding or unseen template),
      lengths i32[B] (number of calls kept, <= H).
    Raises:
      KeyError for an unknown tool name (with suggestions).
    """
    b = len(trajectories)
    tools = np.full((b, horizon), -1, np.int32)
    templates = np.full((b, horizon), -1, np.int32)
    lengths = np.zeros((b,), np.int32)
    for i, traj in enumerate(trajectories):
      for h, (name, keys) in enumerate(list(traj)[:horizon]):
        t = self.tool_index(name)
        tools[i, h] = t
        templates[i, h] = self.template_index(t, keys)
      lengths[i] = min(len(traj), horizon)
    return tools, templates, lengths

  def to_networkx(self) -> nx.DiGraph:
    """The graph as a `networkx.DiGraph`.

    Nodes are tool names plus `START`, with attributes `index` (node index) and, for tools,
    `templates` and `template_counts` (list of ints). Edges are those of `edge_mask`, with
    attribute `count` (observed transitions; 0 is possible in 'all' mode).
    """
    g = nx.DiGraph(edges=self.edges)
    g.add_node(START, index=self.start_index)
    for i, name in enumerate(self.tool_names):
      k = len(self.templates[i])
      g.add_node(name, index=i, templates=list(self.templates[i]),
                 template_counts=[int(c) for c in self.template_counts[i, :k]])
    names = self.tool_names + [START]
    src, dst = np.nonzero(self.edge_mask)
    g.add_edges_from((names[s], names[d], {"count": int(self.edge_counts[s, d])})
                     for s, d in zip(src.tolist(), dst.tolist()))
    return g


def build_tool_graph(tool_names: Sequence[str],
                     trajectories: Iterable[Sequence[Call]],
                     *,
                     edges: str = "observed",
                     max_templates: int = 8,
                     fallback_templates: Mapping[str, Sequence[str]] | None = None) -> ToolGraph:
  """Builds the tool-transition graph and argument templates from training trajectories.

  Edges: count(i -> j) = number of consecutive call pairs (i, j) over all trajectories, plus
  START -> first call of each trajectory. Templates: for each tool, the distinct sets of
  argument keys it was called with, ranked by frequency (ties broken by first appearance, which
  reproduces the authors' variant order `name`, `name_v1`, ...), the top `max_templates` kept.

  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO", "Graph"): "A directed edge (i, j) exists
  where tool j can follow tool i (every pair, or those observed in trajectories: a config
  option)"; argument templates mined from trajectories.

  Args:
    tool_names: the N tool names, in node order (e.g. the environment's tool list); unique.
    trajectories: iterable of trajectories, each a sequence of (tool_name, arg_keys) with
      arg_keys a sequence of argument-key names (order and duplicates ignored).
    edges: 'observed' (edges with count > 0) or 'all' (every tool can follow every tool and
      START, self-loops included). Config key `graph.edges`.
    max_templates: keep at most this many templates per tool (config `graph.max_templates`).
      Calls whose key set is ranked lower get template index -1 from `template_index`.
    fallback_templates: optional {tool name: argument keys}, used as the single template of a
      tool that no trajectory calls (e.g. its required parameters from the tool catalogue);
      such a tool otherwise gets the empty template ().
  Returns:
    A `ToolGraph`.
  Raises:
    ValueError on empty or duplicate tool names, a bad `edges` mode or max_templates < 1;
    KeyError (with close-name suggestions) for a trajectory or fallback naming an unknown tool;
    TypeError when arg_keys is a bare string.
  Notes:
    Edge counts count every transition, repeats included; whether a repeated transition within
    one trajectory deposits pheromone once or twice is decided in `phgpo.pheromone.deposit` (once).
  """
  names = list(tool_names)
  if not names:
    raise ValueError("tool_names is empty: pass the environment's tool list.")
  dupes = [n for n, c in collections.Counter(names).items() if c > 1]
  if dupes:
    raise ValueError(f"tool_names must be unique; duplicated: {dupes[:5]}.")
  if START in names:
    raise ValueError(f"{START!r} is reserved for the START node; rename that tool.")
  if edges not in EDGE_MODES:
    raise ValueError(f"graph.edges must be one of {EDGE_MODES}, got {edges!r}.")
  if int(max_templates) < 1:
    raise ValueError(f"graph.max_templates must be >= 1, got {max_templates}.")
  n = len(names)
  index = {name: i for i, name in enumerate(names)}

  def lookup(name, where):
    if name not in index:
      close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.6)
      hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
      raise KeyError(f"{where}: unknown tool {name!r}.{hint}")
    return index[name]

  counts = np.zeros((n + 1, n), np.int64)
  tmpl_count = [collections.Counter() for _ in range(n)]
  tmpl_first: list[dict[tuple[str, ...], int]] = [{} for _ in range(n)]
  order = 0
  for b, traj in enumerate(trajectories):
    prev = n
    for h, call in enumerate(traj):
      where = f"trajectory {b}, call {h}"
      try:
        name, keys = call
      except (TypeError, ValueError):
        raise TypeError(f"{where}: expected a (tool_name, arg_keys) pair, got {call!r}.") from None
      j = lookup(name, where)
      keys = _normalise_keys(keys, where=where)
      counts[prev, j] += 1
      tmpl_count[j][keys] += 1
      tmpl_first[j].setdefault(keys, order)
      order += 1
      prev = j

  fallback = {}
  for name, keys in (fallback_templates or {}).items():
    fallback[lookup(name, "fallback_templates")] = _normalise_keys(keys, where=f"fallback {name!r}")

  templates, per_tool_counts = [], []
  for j in range(n):
    if tmpl_count[j]:
      ranked = sorted(tmpl_count[j], key=lambda k: (-tmpl_count[j][k], tmpl_first[j][k]))
      ranked = ranked[:max_templates]
      templates.append(tuple(ranked))
      per_tool_counts.append([tmpl_count[j][k] for k in ranked])
    else:
      templates.append((fallback.get(j, ()),))
      per_tool_counts.append([0])
  tm = max(len(t) for t in templates)
  template_counts = np.zeros((n, tm), np.int32)
  template_mask = np.zeros((n, tm), bool)
  for j, c in enumerate(per_tool_counts):
    template_counts[j, :len(c)] = c
    template_mask[j, :len(c)] = True

  if counts.max(initial=0) > np.iinfo(np.int32).max:
    raise ValueError("edge counts overflow int32.")
  edge_counts = counts.astype(np.int32)
  edge_mask = edge_counts > 0 if edges == "observed" else np.ones((n + 1, n), bool)
  return ToolGraph(tool_names=names, edges=edges, edge_counts=edge_counts, edge_mask=edge_mask,
                   templates=templates, template_counts=template_counts,
                   template_mask=template_mask)


def graph_from_counts(tool_names: Sequence[str], edge_counts: np.ndarray,
                      templates: Mapping[str, Sequence[tuple[Sequence[str], int]]], *,
                      edges: str = "observed", max_templates: int = 8,
                      fallback_templates: Mapping[str, Sequence[str]] | None = None) -> ToolGraph:
  """A ToolGraph from precomputed counts instead of trajectories (a graph prior, `phgpo.catalogue.PriorGraph`).

  Edges and their counts are `edge_counts` as given; each tool's templates are its ranked (argument keys, call
  count) pairs, the first `max_templates` kept; a tool without any gets its fallback (or the empty template)
  with count 0, as in `build_tool_graph`.

  Args:
    tool_names: the N tool names, in node order; unique.
    edge_counts: int[N+1, N] transitions, row N = START (zeros where the prior has no first calls).
    templates: {tool name: ((arg_keys, count), ...)} ranked best first; names outside tool_names are ignored.
    edges, max_templates, fallback_templates: as in `build_tool_graph` (config `graph.edges`,
      `graph.max_templates`).
  Returns:
    A `ToolGraph` (edge_mask = edge_counts > 0 for 'observed').
  Raises:
    ValueError on bad sizes, modes or negative counts; KeyError for a fallback naming an unknown tool.
  """
  names = list(tool_names)
  base = build_tool_graph(names, [], edges=edges, max_templates=max_templates,
                          fallback_templates=fallback_templates)
  n = len(names)
  counts = np.asarray(edge_counts)
  if counts.shape != (n + 1, n):
    raise ValueError(f"edge_counts must have shape (N+1, N) = {(n + 1, n)}, got {counts.shape}.")
  if (counts < 0).any() or counts.max(initial=0) > np.iinfo(np.int32).max:
    raise ValueError("edge_counts must lie in [0, 2**31).")
  counts = counts.astype(np.int32)
  ranked, per_tool = [], []
  for j, name in enumerate(names):
    kept, seen = [], set()
    for keys, c in templates.get(name, ()):
      keys = _normalise_keys(keys, where=f"templates of {name!r}")
      if keys not in seen:
        seen.add(keys)
        kept.append((keys, int(c)))
    kept = kept[:int(max_templates)]
    if kept:
      ranked.append(tuple(k for k, _ in kept))
      per_tool.append([c for _, c in kept])
    else:
      ranked.append(base.templates[j])
      per_tool.append([0])
  tm = max(len(t) for t in ranked)
  template_counts = np.zeros((n, tm), np.int32)
  template_mask = np.zeros((n, tm), bool)
  for j, c in enumerate(per_tool):
    template_counts[j, :len(c)] = c
    template_mask[j, :len(c)] = True
  edge_mask = counts > 0 if edges == "observed" else np.ones((n + 1, n), bool)
  return ToolGraph(tool_names=names, edges=edges, edge_counts=counts, edge_mask=edge_mask, templates=ranked,
                   template_counts=template_counts, template_mask=template_mask)
