"""The tool catalogue PhGPO's problem builder consumes, and its two readers (config `data.format`).

The format (`Catalogue`), whatever the files look like:
  tools   ToolSpec per tool, sorted by name: name, description, domain, required and optional parameter names
          and a JSON-schema `input_schema` (MCP `inputSchema` form); `phgpo.data.ToolSpec`.
  tasks   Task per query, in reader order: task id, domain, query text and its ordered gold calls
          (`phgpo.data.ToolCall`: tool name, arguments, argument-key set, status and, where known, the recorded
          output; '' where the catalogue has none, which the replay environment then answers).
  prior   PriorGraph or None: a precomputed tool-transition graph (edge counts between tools, argument templates
          with call counts), read from a file rather than mined from the training split; what
          `pheromone.init_graph = 'prior'` starts the pheromone from and what a catalogue with too few training
          trajectories takes as its graph (`phgpo.problem.prepare_problem`, config `graph.min_trajectories`).
  paths   {'queries': folder of the queries, 'graph': file of the prior (when one was read)}, for provenance.

Readers (config `data.format`):

'traject_bench' (default): TRAJECT-Bench's own layout, `phgpo.data` (`sequential/<Domain>/traj_query.json`,
  `tools/<Domain>_tool.json`); the folder is `data.path`, else $TRAJECT_BENCH_DIR, else the shared copy
  (`phgpo.data.find_traject_bench`). Its prior, read only when something asks for one, is the file named by
  `data.graph_path`, else the PhGPO authors' graph of the shared copy (`default_graph_dir`).

'authors_graph': the PhGPO authors' TRAJECT-Bench graph (`../shared/data/phgpo_graphs/traject_bench/`, from the
  authors' release, MIT; folder or file in config `data.graph_path`, '' = that shared folder):
  - `mcp_rl_graph.json` = {'tools': [variant records], 'meta': {'total_tools': 715, 'tools_with_transitions':
    682, 'total_edges': 1815, 'source': 'TRAJECT-Bench'}}. One record per (tool, argument pattern) "variant":
    'name' ('<tool>' for the tool's most called pattern, '<tool>_v<k>' for the k-th next), 'original_name' (the
    tool: TRAJECT-Bench's "<parent tool>: <API name>"), 'parent_tool', 'api_name', 'domain', 'description' (the
    description TRAJECT-Bench's gold calls carry, not its catalogue's), 'actual_keys' (the argument keys of the
    calls with this pattern), 'params' ({key: {'type': 'string', 'required': True, 'description': ''}}: one
    entry per key of this pattern; every type is 'string' and every description empty in the release),
    'key_hash' (a 12-hex digest of the key set), 'call_count' (calls with this pattern), 'next_tools'
    ({successor tool: number of observed transitions}, the tool's counts, stored again on every variant of it).
    715 variants of 381 tools; 801 distinct tool-to-tool edges (1,815 variant-level entries), no START node.
  - `all_tools.json`: the same 715 variant records with 'key_pattern', 'variant_index' and an empty
    'parameters_schema' in the release; not read (`mcp_rl_graph.json` has everything it has).
  Variants map to tools and templates so: the variants of one 'original_name' are one tool (one node, one
  action); each variant's sorted 'actual_keys' is one argument template of that tool, ranked by its suffix (0
  for the bare name; the release ranks by 'call_count', ties by first appearance, which `phgpo.graph` reproduces)
  with 'call_count' its count; the tool's parameters are the union of its variants' keys, in rank order,
  required = the keys every variant has, optional = the rest, JSON types from 'params' (all 'string').
  Edges: variant v's 'next_tools' {t: c} adds c transitions tool(v) -> t, t being a tool name (a variant name is
  mapped to its tool); when every variant of a tool lists the same counts (the release) they are counted once,
  otherwise the variants' counts are summed. An edge to a name that is neither a tool nor a variant of the file
  is `UnknownEdgeTool`.
  The file holds no queries: the queries are TRAJECT-Bench's (`sequential/<Domain>/traj_query.json` of the
  folder `data.path` / $TRAJECT_BENCH_DIR / the shared copy names), joined by name: a gold call's "tool name"
  is a tool's 'original_name', and its argument-key set is one of that tool's variants (templates). Tools that
  gold calls use but the file lacks are added from the calls (as `phgpo.data.load_tool_catalogue` adds the
  catalogue's missing ones); none in the release (the 381 tools are exactly those TRAJECT-Bench's 1,670 queries
  call: tests/phgpo_graph_test.py checks the counts equal the graph `phgpo.graph` builds from all of them).
  Leakage: the authors counted every query, the held-out ones included, so their edge counts contain the
  held-out queries' transitions; `phgpo.problem` prints how many when the prior is used.

Both readers keep `data.tool_scope` ('used': the tools the loaded queries call; 'all': every tool of the
catalogue plus the tools only gold calls name) and `data.domains`, and draw `data.max_tasks` queries (0 = all)
by a permutation seeded by `data.split_seed`, before the tools are chosen (as the loader always did).

Named errors (all ValueError subclasses, each saying what it found and which key or file to change):
`TooFewQueries`, `EmptyHeldOut` (raised by `check_split`), `UnusedTools` (no tool of the catalogue is called by
any query), `UnknownEdgeTool` (an edge of the graph file names a tool the file does not list).
"""
from __future__ import annotations

import collections
import dataclasses
import difflib
import json
import logging
import os
import pathlib
import re
from typing import Any, Mapping, Sequence

import numpy as np

from phgpo import data as data_lib

FORMATS = ("traject_bench", "authors_graph")   # config data.format
GRAPH_FILE = "mcp_rl_graph.json"
_VARIANT = re.compile(r"^(?P<tool>.*)_v(?P<rank>\d+)$")

_log = logging.getLogger(__name__)


class CatalogueError(data_lib.DataError):
  """A catalogue whose parts do not fit together (a ValueError; subclasses name the case)."""


class TooFewQueries(CatalogueError):
  """Fewer queries (or gold chains) than a split into a training and a held-out side needs."""


class EmptyHeldOut(CatalogueError):
  """The split holds no query out (data.held_out_fraction rounds to none in every domain)."""


class UnusedTools(CatalogueError):
  """A catalogue none of whose tools any loaded query calls (the names do not join)."""


class UnknownEdgeTool(CatalogueError):
  """An edge of a graph file to a tool the file does not list."""


@dataclasses.dataclass(frozen=True)
class PriorGraph:
  """A precomputed tool-transition graph, by tool name.

  Attributes:
    tool_names: the graph's tools (sorted).
    edges: {(prev tool, next tool): count >= 1} transitions; prev may be `phgpo.graph.START` where the file has
      first calls (the authors' file has none).
    templates: {tool: ((sorted argument keys, call count), ...)} ranked (variant rank order).
    path: the file read.
  """
  tool_names: tuple[str, ...]
  edges: Mapping[tuple[str, str], int]
  templates: Mapping[str, tuple[tuple[tuple[str, ...], int], ...]]
  path: str

  def counts(self, tool_names: Sequence[str]) -> tuple[np.ndarray, int]:
    """The prior's counts aligned with a graph's tool order.

    Args:
      tool_names: the N tools of the problem's graph, in node order.
    Returns:
      (i32[N+1, N] counts, row N = START; number of the prior's edges dropped because a tool is not among
      `tool_names`, e.g. outside `data.tool_scope` 'used' or `data.max_tasks`).
    """
    from phgpo import graph as graph_lib  # pylint: disable=g-import-not-at-top
    index = {n: i for i, n in enumerate(tool_names)}
    n = len(index)
    out = np.zeros((n + 1, n), np.int64)
    dropped = 0
    for (a, b), c in self.edges.items():
      i = n if a == graph_lib.START else index.get(a)
      j = index.get(b)
      if i is None or j is None:
        dropped += 1
        continue
      out[i, j] += c
    if out.max(initial=0) > np.iinfo(np.int32).max:
      raise CatalogueError(f"{self.path}: edge counts overflow int32")
    return out.astype(np.int32), dropped


@dataclasses.dataclass(frozen=True)
class Catalogue:
  """What PhGPO's problem builder consumes (module docstring).

  Attributes:
    format: the reader that made it ('traject_bench' or 'authors_graph', config `data.format`).
    tools: ToolSpecs sorted by name (the graph's node order).
    tasks: Tasks in reader order (domain by name, then file position).
    prior: the precomputed graph, or None (traject_bench: read later by `load_prior` when asked for).
    paths: {'queries': str, 'graph': str (when a graph file was read)}, absolute.
  """
  format: str
  tools: tuple[data_lib.ToolSpec, ...]
  tasks: tuple[data_lib.Task, ...]
  prior: PriorGraph | None
  paths: Mapping[str, str]


# ----------------------------------------------------------------------------- locating files


def default_graph_dir() -> pathlib.Path:
  """The shared copy of the authors' TRAJECT-Bench graph: `<repo root>/../shared/data/phgpo_graphs/traject_bench`."""
  return data_lib.repo_root().parent / "shared" / "data" / "phgpo_graphs" / "traject_bench"


def find_graph_file(path: str | os.PathLike | None = None) -> pathlib.Path:
  """The authors' graph file: `path` (config `data.graph_path`: the file, or a folder holding
  `mcp_rl_graph.json`) as given, else the shared copy (`default_graph_dir`).

  Raises:
    FileNotFoundError: naming the place looked at and the key to set.
  """
  given = bool(path)
  p = pathlib.Path(path).expanduser() if given else default_graph_dir()
  file = p / GRAPH_FILE if p.is_dir() or not p.suffix else p
  if not file.is_file():
    where = "config data.graph_path" if given else "the shared copy (config data.graph_path '' = default)"
    raise FileNotFoundError(
        f"the PhGPO authors' graph file {file} does not exist ({where}). Set --config.data.graph_path to the "
        f"folder holding {GRAPH_FILE} (or the file itself); the authors' TRAJECT-Bench graph is in "
        f"{default_graph_dir()} when the shared data is present.")
  return file.resolve()


# ----------------------------------------------------------------------------- the authors' graph


def _graph_fail(file, index, msg) -> data_lib.DataError:
  where = f"{file}" + (f", record {index}" if index is not None else "")
  return data_lib.DataError(f"{where}: {msg}. Fix the file, or point config data.graph_path at another one.")


def _variant_rank(name: str, tool: str) -> int:
  """0 for the bare tool name, k for '<tool>_v<k>'; other names rank after every numbered one (their order kept)."""
  if name == tool:
    return 0
  m = _VARIANT.match(name)
  return int(m.group("rank")) if m and m.group("tool") == tool else 10 ** 6


def read_authors_graph_file(file: str | os.PathLike) -> tuple[list[dict], PriorGraph]:
  """Reads and checks `mcp_rl_graph.json`: its variant records grouped by tool, and its edges (module docstring).

  Args:
    file: the graph file.
  Returns:
    (per tool, sorted by name: {'name', 'description', 'domain', 'variants': [(rank, record)] ranked};
     the PriorGraph of tool-to-tool counts and ranked templates).
  Raises:
    DataError: a malformed file (names the record). UnknownEdgeTool: an edge to a name that is neither a tool
    nor a variant of the file.
  """
  file = pathlib.Path(file)
  try:
    raw = json.loads(file.read_text(encoding="utf-8"))
  except json.JSONDecodeError as e:
    raise _graph_fail(file, None, f"not valid JSON ({e})") from e
  records = raw.get("tools") if isinstance(raw, dict) else None
  if not isinstance(records, list):
    raise _graph_fail(file, None, "must be an object {'tools': [variant records], 'meta': {...}}")
  by_tool: dict[str, list[tuple[int, int, dict]]] = collections.defaultdict(list)
  variant_tool: dict[str, str] = {}
  for i, r in enumerate(records):
    if not isinstance(r, dict):
      raise _graph_fail(file, i, f"must be an object, got {type(r).__name__}")
    for key, kind in (("name", str), ("original_name", str), ("actual_keys", list), ("next_tools", dict)):
      if not isinstance(r.get(key), kind):
        raise _graph_fail(file, i, f"needs {key!r} ({kind.__name__}), got {r.get(key)!r:.60}")
    if not all(isinstance(k, str) for k in r["actual_keys"]):
      raise _graph_fail(file, i, "'actual_keys' must be a list of argument names")
    count = r.get("call_count", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
      raise _graph_fail(file, i, f"'call_count' must be an integer >= 0, got {count!r}")
    for nxt, c in r["next_tools"].items():
      if isinstance(c, bool) or not isinstance(c, int) or c < 0:
        raise _graph_fail(file, i, f"next_tools[{nxt!r}] must be a count >= 0, got {c!r}")
    if r["name"] in variant_tool:
      raise _graph_fail(file, i, f"variant name {r['name']!r} appears twice")
    variant_tool[r["name"]] = r["original_name"]
    by_tool[r["original_name"]].append((_variant_rank(r["name"], r["original_name"]), i, r))
  tools = {name: [(rank, r) for rank, _, r in sorted(vs, key=lambda v: (v[0], v[1]))]
           for name, vs in by_tool.items()}

  edges: dict[tuple[str, str], int] = {}
  for tool, variants in sorted(tools.items()):
    lists = []
    for _, r in variants:
      resolved = collections.Counter()
      for nxt, c in r["next_tools"].items():
        target = nxt if nxt in tools else variant_tool.get(nxt)
        if target is None:
          close = difflib.get_close_matches(nxt, list(tools), n=3, cutoff=0.6)
          hint = f" Close tool names: {close}." if close else ""
          raise UnknownEdgeTool(
              f"{file}: variant {r['name']!r} of tool {tool!r} has an edge to {nxt!r}, which is neither a tool "
              f"('original_name') nor a variant ('name') of the file's {len(tools)} tools / {len(variant_tool)} "
              f"variants.{hint} Fix 'next_tools' in that file, or point config data.graph_path at another graph.")
        if c > 0:
          resolved[target] += c
      lists.append(resolved)
    same = all(l == lists[0] for l in lists)
    total = lists[0] if same else sum(lists, collections.Counter())
    for target, c in total.items():
      edges[(tool, target)] = int(c)

  out, templates = [], {}
  for tool in sorted(tools):
    variants = tools[tool]
    first = variants[0][1]
    out.append({"name": tool, "description": str(first.get("description", "")).strip(),
                "domain": str(first.get("domain", "")), "variants": variants})
    ranked, seen = [], set()
    for _, r in variants:
      keys = tuple(sorted(set(r["actual_keys"])))
      if keys not in seen:
        seen.add(keys)
        ranked.append((keys, int(r.get("call_count", 0))))
    templates[tool] = tuple(ranked)
  prior = PriorGraph(tool_names=tuple(sorted(tools)), edges=edges, templates=templates, path=str(file.resolve()))
  return out, prior


def _spec_from_variants(tool: dict, extra: Mapping[str, Any]) -> data_lib.ToolSpec:
  """One ToolSpec from a tool's variants: parameters = union of the variants' keys in rank order, required =
  the keys every variant has; `extra` = argument names only gold calls use (added as optional)."""
  props: dict[str, Any] = {}
  order: list[str] = []
  key_sets = []
  for _, r in tool["variants"]:
    params = r.get("params") if isinstance(r.get("params"), dict) else {}
    key_sets.append(set(r["actual_keys"]))
    for k in list(r["actual_keys"]) + [k for k in params if k not in r["actual_keys"]]:
      if k in props:
        continue
      p = params.get(k) if isinstance(params.get(k), dict) else {}
      s = data_lib._schema_of_type(p.get("type"))  # pylint: disable=protected-access
      if p.get("description"):
        s["description"] = str(p["description"]).strip()
      props[k] = s
      order.append(k)
  always = set.intersection(*key_sets) if key_sets else set()
  req = [k for k in order if k in always]
  opt = [k for k in order if k not in always]
  for name, value in extra.items():
    if name not in props:
      props[name] = {**data_lib._schema_of_value(value), "description": "(seen in the recorded calls)"}  # pylint: disable=protected-access
      opt.append(name)
  return data_lib.ToolSpec(name=tool["name"], description=tool["description"], domain=tool["domain"],
                           required=tuple(req), optional=tuple(opt),
                           input_schema={"type": "object", "properties": props, "required": list(req)})


# ----------------------------------------------------------------------------- readers


def _select(tasks: list, max_tasks: int, seed: int) -> list:
  """`max_tasks` of the tasks (0 = all), drawn by a permutation seeded by `seed`, kept in loader order."""
  if not max_tasks:
    return tasks
  keep = np.sort(np.random.default_rng(seed).permutation(len(tasks))[:max_tasks])
  return [tasks[i] for i in keep]


def _check_some_tool_used(tool_names: Sequence[str], tasks: Sequence[data_lib.Task], *, tools_from: str,
                          queries_from: str) -> None:
  used = {c.name for t in tasks for c in t.calls}
  if tool_names and used and not used & set(tool_names):
    raise UnusedTools(
        f"none of the {len(tool_names)} tools of {tools_from} (e.g. {sorted(tool_names)[:2]}) is called by any of "
        f"the {len(tasks)} queries of {queries_from} (they call e.g. {sorted(used)[:2]}): the catalogue and the "
        "queries are joined by tool name, so they belong to different datasets. Point config data.path "
        "(--data_dir) at the queries of this catalogue, or data.graph_path / data.format at its tools.")


def read_traject_bench(root: str | os.PathLike, *, domains: Sequence[str] | None = None, tool_scope: str = "used",
                       max_tasks: int = 0, seed: int = 0) -> Catalogue:
  """TRAJECT-Bench's layout as a Catalogue (prior None: `load_prior` reads one when asked for).

  Args:
    root: the TRAJECT-Bench folder (`phgpo.data.find_traject_bench`).
    domains: domains to load (None / empty: all). Config `data.domains`.
    tool_scope: 'used' or 'all' (`phgpo.data.load_tool_catalogue`). Config `data.tool_scope`.
    max_tasks, seed: keep `max_tasks` queries (0 = all) drawn with `seed` (config `data.max_tasks`,
      `data.split_seed`).
  Returns:
    The Catalogue; tools and tasks exactly as `phgpo.data.load_tasks` / `load_tool_catalogue` give them.
  Raises:
    DataError on malformed files; ValueError on an unknown domain or scope; UnusedTools when no catalogue tool
    is called by any query.
  """
  root = pathlib.Path(root).resolve()
  tasks = _select(data_lib.load_tasks(root, domains=list(domains) if domains else None), max_tasks, seed)
  tools = data_lib.load_tool_catalogue(root, tasks, scope=tool_scope)
  catalogue_names = list(data_lib._read_catalogue(root))  # pylint: disable=protected-access
  _check_some_tool_used(catalogue_names, tasks, tools_from=f"{root}/tools/*_tool.json",
                        queries_from=f"{root}/sequential/*/traj_query.json")
  return Catalogue(format="traject_bench", tools=tuple(tools), tasks=tuple(tasks), prior=None,
                   paths={"queries": str(root)})


def read_authors_graph(graph_file: str | os.PathLike, queries_root: str | os.PathLike, *,
                       domains: Sequence[str] | None = None, tool_scope: str = "used", max_tasks: int = 0,
                       seed: int = 0) -> Catalogue:
  """The PhGPO authors' graph (tools, variants, edge counts) joined with TRAJECT-Bench's queries (module docstring).

  Args:
    graph_file: `mcp_rl_graph.json` (`find_graph_file`; config `data.graph_path`).
    queries_root: the TRAJECT-Bench folder whose `sequential/<Domain>/traj_query.json` hold the queries
      (`phgpo.data.find_traject_bench`; config `data.path`, --data_dir, $TRAJECT_BENCH_DIR).
    domains, tool_scope, max_tasks, seed: as in `read_traject_bench`.
  Returns:
    The Catalogue, with the graph as its prior.
  Raises:
    DataError on malformed files; UnknownEdgeTool; UnusedTools when no tool of the graph is called by any query;
    ValueError on an unknown domain or scope.
  """
  if tool_scope not in data_lib.TOOL_SCOPES:
    raise ValueError(f"scope must be one of {data_lib.TOOL_SCOPES} (config key data.tool_scope), got {tool_scope!r}")
  graph_file = pathlib.Path(graph_file).resolve()
  queries_root = pathlib.Path(queries_root).resolve()
  graph_tools, prior = read_authors_graph_file(graph_file)
  tasks = _select(data_lib.load_tasks(queries_root, domains=list(domains) if domains else None), max_tasks, seed)
  _check_some_tool_used([t["name"] for t in graph_tools], tasks, tools_from=str(graph_file),
                        queries_from=f"{queries_root}/sequential/*/traj_query.json")
  by_name = {t["name"]: t for t in graph_tools}
  calls: dict[str, list] = collections.defaultdict(list)
  for t in tasks:
    for c in t.calls:
      calls[c.name].append(c)
  specs: dict[str, data_lib.ToolSpec] = {}
  for name, cs in calls.items():
    if name in by_name:
      known = {k for _, r in by_name[name]["variants"] for k in r["actual_keys"]}
      extra = {}
      for c in cs:
        for k, v in c.arguments.items():
          if k not in known:
            extra.setdefault(k, v)
      specs[name] = _spec_from_variants(by_name[name], extra)
    else:   # a tool only the queries name: from its calls, as the TRAJECT-Bench reader does
      keys = [set(c.arg_keys) for c in cs]
      always = set.intersection(*keys)
      order = list(dict.fromkeys(k for c in cs for k in c.arguments))
      props = {k: data_lib._schema_of_value(next(c.arguments[k] for c in cs if k in c.arguments))  # pylint: disable=protected-access
               for k in order}
      task = next(t for t in tasks if any(c.name == name for c in t.calls))
      specs[name] = data_lib.ToolSpec(
          name=name, description="", domain=task.domain, required=tuple(k for k in order if k in always),
          optional=tuple(k for k in order if k not in always),
          input_schema={"type": "object", "properties": props, "required": [k for k in order if k in always]},
          source="tasks")
  missing = sum(s.source == "tasks" for s in specs.values())
  _log.info("authors' graph %s: %d tools (%d variants, %d edges); %d tools used by %d queries, %d of them missing "
            "from the graph and added from the calls", graph_file, len(graph_tools),
            sum(len(t["variants"]) for t in graph_tools), len(prior.edges), len(specs), len(tasks), missing)
  if tool_scope == "all":
    for t in graph_tools:
      specs.setdefault(t["name"], _spec_from_variants(t, {}))
  return Catalogue(format="authors_graph", tools=tuple(specs[n] for n in sorted(specs)), tasks=tuple(tasks),
                   prior=prior, paths={"queries": str(queries_root), "graph": str(graph_file)})


def load_catalogue(data_config) -> Catalogue:
  """The catalogue of config section `data` (`data.format` selects the reader).

  Args:
    data_config: the config's `data` section: format, path, graph_path, domains, tool_scope, max_tasks,
      split_seed.
  Raises:
    ValueError: an unknown `data.format`; FileNotFoundError: data not where the keys say (the message says
    what to put where); the readers' errors.
  """
  fmt = data_config.get("format", "traject_bench")
  if fmt not in FORMATS:
    raise ValueError(f"config data.format={fmt!r} is not one of {list(FORMATS)}")
  root = data_lib.find_traject_bench(data_config.path or None)
  kw = dict(domains=list(data_config.domains) or None, tool_scope=data_config.tool_scope,
            max_tasks=int(data_config.max_tasks), seed=int(data_config.split_seed))
  if fmt == "traject_bench":
    return read_traject_bench(root, **kw)
  return read_authors_graph(find_graph_file(data_config.get("graph_path", "") or None), root, **kw)


def load_prior(catalogue: Catalogue, data_config) -> Catalogue:
  """The catalogue with a prior graph: its own (authors_graph), else the file of config `data.graph_path` ('' =
  the shared authors' graph), read with `read_authors_graph_file`.

  Raises:
    FileNotFoundError: no graph file there (names the key). DataError / UnknownEdgeTool: a malformed file.
  """
  if catalogue.prior is not None:
    return catalogue
  file = find_graph_file(data_config.get("graph_path", "") or None)
  _, prior = read_authors_graph_file(file)
  return dataclasses.replace(catalogue, prior=prior, paths={**catalogue.paths, "graph": str(file)})


# ----------------------------------------------------------------------------- split checks


def check_enough_queries(tasks: Sequence[data_lib.Task], *, split: str, where: str) -> None:
  """Raises TooFewQueries when the tasks cannot make a training and a held-out side: fewer than 2 queries, or
  (split 'chain') fewer than 2 distinct gold chains.

  Args:
    tasks: the loaded tasks (after `data.domains` and `data.max_tasks`).
    split: 'random', 'chain' or 'long' (config `splits`).
    where: the queries' folder, for the message.
  """
  units = len(tasks) if split != "chain" else len({tuple(c.name for c in t.calls) for t in tasks})
  what = "queries" if split != "chain" else "distinct gold chains (the 'chain' split holds out whole chains)"
  if units < 2:
    raise TooFewQueries(
        f"the {split!r} split needs at least 2 {what}, one to train on and one to hold out; found {units} "
        f"({len(tasks)} queries in {where}, domains {sorted({t.domain for t in tasks}) or 'none'}). Add queries "
        "(sequential/<Domain>/traj_query.json), or widen config data.domains / raise data.max_tasks.")


def check_split(tasks: Sequence[data_lib.Task], train: Sequence[data_lib.Task], held: Sequence[data_lib.Task], *,
                split: str, held_out_fraction: float, where: str) -> None:
  """Raises EmptyHeldOut when the split held no query out, naming the per-domain counts and the key to change.

  Args:
    tasks, train, held: all tasks and the two sides of the split.
    split: the split's name (config `splits`); held_out_fraction: config `data.held_out_fraction`.
    where: the queries' folder, for the message.
  """
  if held:
    return
  per = collections.Counter(t.domain for t in tasks)
  unit = "queries" if split != "chain" else "gold chains"
  raise EmptyHeldOut(
      f"the {split!r} split holds no query out: data.held_out_fraction={held_out_fraction} of each domain's "
      f"{unit} rounds to 0 in every domain ({dict(sorted(per.items()))} queries of {where}); {len(train)} "
      f"would train. Raise config data.held_out_fraction (a domain of n {unit} holds out round(f n)), add "
      "queries, or load fewer domains (data.domains) with more queries each.")
