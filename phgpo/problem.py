"""The PhGPO problem: a catalogue's tasks, the held-out split, the tool graph, frozen embeddings, the policy.

Built once per process on the host (`prepare_problem`) from the catalogue config `data.format` names
(`phgpo.catalogue`: TRAJECT-Bench's layout, or the PhGPO authors' graph joined with TRAJECT-Bench's queries) and
never changed by training; every stage reads it.

The tool graph: built from the training split's gold trajectories (`phgpo.graph.build_tool_graph`), unless the
training split holds fewer than config `graph.min_trajectories` of them and a graph prior is at hand (the
catalogue's own, `data.graph_path`, or the shared authors' graph): then the graph is the prior alone
(`phgpo.graph.graph_from_counts`: its edges, counts and argument templates), and a printed line says so.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import ml_collections
import numpy as np

from phgpo import catalogue as catalogue_lib
from phgpo import data as data_lib
from phgpo import graph as graph_lib
from phgpo import long_horizon
from phgpo import policy as policy_lib


@dataclasses.dataclass
class Problem:
  """Everything a run needs that does not change during training.

  Attributes:
    tasks: all tasks, in loader order.
    train_idx, eval_idx: i64 indices into `tasks` (the held-out split is fixed by `data.split_seed`).
    tool_specs: the tool catalogue, in graph order (tool n of the graph is tool_specs[n]).
    graph: the tool-transition graph built from the training tasks only.
    query_emb: f32[num_tasks, D] sentence embeddings of the queries.
    tool_emb: f32[N, D] sentence embeddings of "name: description".
    gold_tools, gold_templates: i32[num_tasks, H] gold calls, -1 padded (H = env.max_steps).
    gold_status: i32[num_tasks, H] STATUS_CODES of the recorded gold observations.
    gold_len: i32[num_tasks], min(number of gold calls, H).
    split: the held-out split it was built for ('random' or 'chain', config `splits`).
    data_format: the catalogue reader (config `data.format`).
    data_paths: {'queries': folder, 'graph': file of the prior, when one was read}, absolute.
    prior_counts: i32[N+1, N] the graph prior's transition counts in graph node order (row N = START), or None
      when no prior was read (`pheromone.init_graph = 'prior'` reads them).
    graph_source: 'train' (the graph was built from the training split) or 'prior' (from the prior alone).
  """
  tasks: list
  train_idx: np.ndarray
  eval_idx: np.ndarray
  tool_specs: list
  graph: Any
  query_emb: np.ndarray
  tool_emb: np.ndarray
  gold_tools: np.ndarray
  gold_templates: np.ndarray
  gold_status: np.ndarray
  gold_len: np.ndarray
  split: str = "random"
  data_format: str = "traject_bench"
  data_paths: dict = dataclasses.field(default_factory=dict)
  prior_counts: np.ndarray | None = None
  graph_source: str = "train"


def status_code(status: str) -> int:
  """`policy.STATUS_CODES` of an observation status; unknown statuses count as 'invalid'."""
  return policy_lib.STATUS_CODES.get(status, policy_lib.STATUS_CODES["invalid"])


def wants_prior(config: ml_collections.ConfigDict) -> bool:
  """Whether the problem must read a graph prior: config `data.format` 'authors_graph' (the prior is the
  catalogue), a `data.graph_path` given, or a run of config `runs` (or the config itself) starting its
  pheromone from it (`pheromone.init_graph = 'prior'`, e.g. the ablation row 'init_graph')."""
  from phgpo import runs as runs_lib  # pylint: disable=g-import-not-at-top
  if config.data.get("format", "traject_bench") == "authors_graph" or config.data.get("graph_path", ""):
    return True
  if config.pheromone.get("init_graph", "") == "prior":
    return True
  for run in config.get("runs", ()):
    if run in runs_lib.RUN_SPECS and runs_lib.RUN_SPECS[run]["kind"] == "rl":
      if runs_lib.run_config(config, run).pheromone.get("init_graph", "") == "prior":
        return True
  return False


def _transitions(tasks, index) -> set:
  """(prev, next) tool-index pairs of the tasks' gold chains (tool to tool only)."""
  return {(index[a.name], index[b.name]) for t in tasks for a, b in zip(t.calls, t.calls[1:])}


def _prior_counts(cat: catalogue_lib.Catalogue, names, *, required: bool, log) -> np.ndarray | None:
  """The prior's counts in graph order, or None (with a printed line) when it shares no tool with the graph and
  is not `required`. Raises UnusedTools when it is required and shares none."""
  counts, dropped = cat.prior.counts(names)
  shared = len(set(names) & set(cat.prior.tool_names))
  if shared == 0:
    msg = (f"the graph prior {cat.paths.get('graph')} shares no tool with the catalogue's {len(names)} tools "
           f"({cat.paths.get('queries')}): the two are joined by tool name. Set config data.graph_path to this "
           "catalogue's graph (a file like mcp_rl_graph.json)")
    if required:
      raise catalogue_lib.UnusedTools(msg + ", or use no prior (pheromone.init_graph '' or 'train').")
    log(f"PhGPO: {msg}; the prior is not used.")
    return None
  log(f"PhGPO: graph prior {cat.paths.get('graph')}: {int((counts > 0).sum())} edges over the catalogue's tools, "
      f"{shared} of its {len(cat.prior.tool_names)} tools in the catalogue ({dropped} edges to tools outside it "
      f"dropped)")
  return counts


def prepare_problem(config: ml_collections.ConfigDict, split: str = "random", *,
                    log: Callable[[str], None] = print) -> Problem:
  """Loads the catalogue, splits it, builds the graph (from the training split, or the prior alone) and embeds.

  Args:
    config: the PhGPO config (its data, graph, env and encoder sections; `runs` and `pheromone.init_graph` say
      whether a graph prior is read, `wants_prior`).
    split: 'random' (the authors' stratified query split, `phgpo.data.split_tasks`), 'chain' (whole tool
      chains held out, `phgpo.data.split_tasks_by_chain`) or 'long' (SYNTHETIC: the random split's training
      tasks plus their composed pairs, held-out = composed pairs of held-out tasks only, 6-20 calls,
      `phgpo.long_horizon.compose_long_horizon`); one entry of config `splits`.
    log: where the lines about the data go (the graph prior, the graph from the prior alone).

  Raises:
    ValueError: an unknown split or data.format.
    FileNotFoundError: the data is not where config `data.path` / --data_dir / $TRAJECT_BENCH_DIR or, without
      them, the shared copy is (the message says what to download and where); the graph file of
      `data.graph_path` is missing.
    phgpo.catalogue.TooFewQueries, EmptyHeldOut, UnusedTools, UnknownEdgeTool: a catalogue that cannot make the
      split or whose parts do not join (each names the key or file to change).
  """
  from common import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
  from phgpo import features  # pylint: disable=g-import-not-at-top

  if split not in data_lib.SPLITS:
    raise ValueError(f"unknown split {split!r} (config splits); valid: {list(data_lib.SPLITS)}")
  cat = catalogue_lib.load_catalogue(config.data)
  where = cat.paths["queries"]
  logging.warning("PhGPO catalogue (data.format %s) from %s", cat.format, cat.paths)
  tasks = list(cat.tasks)
  catalogue_lib.check_enough_queries(tasks, split=split, where=where)
  split_fn = data_lib.split_tasks_by_chain if split == "chain" else data_lib.split_tasks
  train_tasks, eval_tasks = split_fn(
      tasks, held_out_fraction=config.data.held_out_fraction, seed=config.data.split_seed)
  catalogue_lib.check_split(tasks, train_tasks, eval_tasks, split=split,
                            held_out_fraction=config.data.held_out_fraction, where=where)
  if split == "long":   # SYNTHETIC: the random split's sides, each task joined with one of its own side
    kw = dict(min_calls=config.data.long_min_calls, max_calls=config.data.long_max_calls,
              seed=config.data.split_seed)
    long_train = long_horizon.compose_long_horizon(train_tasks, **kw)
    eval_tasks = long_horizon.compose_long_horizon(eval_tasks, **kw)
    train_tasks = train_tasks + long_train
    tasks = tasks + long_train + eval_tasks
  pos = {t.task_id: i for i, t in enumerate(tasks)}
  train_idx = np.array([pos[t.task_id] for t in train_tasks], np.int64)
  eval_idx = np.array([pos[t.task_id] for t in eval_tasks], np.int64)

  tool_specs = list(cat.tools)
  names = [s.name for s in tool_specs]
  min_traj = int(config.graph.get("min_trajectories", 0))
  few = len(train_tasks) < min_traj
  want = wants_prior(config)
  prior_counts = None
  if want or few:
    try:
      cat = catalogue_lib.load_prior(cat, config.data)
    except FileNotFoundError as e:
      if want:
        raise
      log(f"PhGPO: no graph prior to fall back on ({e})")
    if cat.prior is not None:
      prior_counts = _prior_counts(cat, names, required=want, log=log)
  fallback = {s.name: tuple(sorted(s.required)) for s in tool_specs}
  if cat.format == "authors_graph":   # a tool no training query calls: its most called variant
    fallback.update({n: cat.prior.templates[n][0][0] for n in names if cat.prior.templates.get(n)})
  if few and prior_counts is not None:
    graph = graph_lib.graph_from_counts(names, prior_counts, cat.prior.templates, edges=config.graph.edges,
                                        max_templates=config.graph.max_templates, fallback_templates=fallback)
    source = "prior"
    log(f"PhGPO: the training split holds {len(train_tasks)} gold trajectories (< graph.min_trajectories = "
        f"{min_traj}): the tool graph comes from the graph prior alone ({cat.paths['graph']}: "
        f"{int(graph.edge_mask.sum())} edges, {int(graph.template_mask.sum())} argument templates; no START "
        f"edges unless the prior has them)" + ("; no training trajectory: the warm-up and RL take no step, the "
                                               "runs decode with the prior" if not train_tasks else ""))
  else:
    graph = graph_lib.build_tool_graph(
        names, [[(c.name, c.arg_keys) for c in t.calls] for t in train_tasks],
        edges=config.graph.edges, max_templates=config.graph.max_templates, fallback_templates=fallback)
    source = "train"
    if few:
      log(f"PhGPO: the training split holds {len(train_tasks)} gold trajectories (< graph.min_trajectories = "
          f"{min_traj}) and there is no usable graph prior: the graph is built from them "
          f"({int(graph.edge_mask.sum())} edges)")
  if prior_counts is not None:
    index = {n: i for i, n in enumerate(names)}
    unseen = _transitions(eval_tasks, index) - _transitions(train_tasks, index)
    leaked = sum(prior_counts[i, j] > 0 for i, j in unseen)
    log(f"PhGPO: {leaked} of the {len(unseen)} held-out tool transitions that no training query makes are edges "
        "of the graph prior" + (": the prior has seen held-out queries, so a row started from it "
                                "(pheromone.init_graph 'prior') is an upper bound, not a clean held-out result"
                                if leaked else ""))

  h = config.env.max_steps
  n_tasks = len(tasks)
  gold_tools = np.full((n_tasks, h), -1, np.int32)
  gold_templates = np.full((n_tasks, h), -1, np.int32)
  gold_status = np.zeros((n_tasks, h), np.int32)
  gold_len = np.zeros((n_tasks,), np.int32)
  for i, t in enumerate(tasks):
    calls = t.calls[:h]
    gold_len[i] = len(calls)
    for k, c in enumerate(calls):
      n = graph.tool_index(c.name)
      gold_tools[i, k] = n
      gold_templates[i, k] = graph.template_index(n, c.arg_keys)
      gold_status[i, k] = status_code("ok" if c.status == "success" else "failed")

  cache_dir = config.encoder.cache_dir or None
  enc = encoder_lib.SentenceEncoder.from_package(max_length=config.encoder.max_length)
  query_emb = features.embed_texts(enc, [t.query for t in tasks], cache_dir=cache_dir,
                                   batch_size=config.encoder.batch_size)
  tool_emb = features.embed_texts(enc, [f"{s.name}: {s.description}" for s in tool_specs],
                                  cache_dir=cache_dir, batch_size=config.encoder.batch_size)
  return Problem(tasks, train_idx, eval_idx, tool_specs, graph, np.asarray(query_emb, np.float32),
                 np.asarray(tool_emb, np.float32), gold_tools, gold_templates, gold_status, gold_len, split,
                 data_format=cat.format, data_paths=dict(cat.paths), prior_counts=prior_counts,
                 graph_source=source)


def make_policy(config: ml_collections.ConfigDict, problem: Problem) -> policy_lib.ToolPolicy:
  """Builds the policy named by `config.policy.kind` ('encoder_mlp', 'retrieval_mlp' or 'lm').

  Raises:
    ValueError: unknown policy kind (the message lists the valid ones).
  """
  kind = config.policy.kind
  if kind == "encoder_mlp":
    return policy_lib.EncoderMLPPolicy(problem.tool_emb, problem.query_emb, hidden=config.policy.hidden,
                                       max_steps=config.env.max_steps)
  if kind == "retrieval_mlp":
    from phgpo import retrieval  # pylint: disable=g-import-not-at-top
    from phgpo import retrieval_policy  # pylint: disable=g-import-not-at-top
    mode = retrieval_policy.leakage_mode(config.policy.leakage, problem.split)
    return retrieval_policy.RetrievalMLPPolicy(
        problem.tool_emb, problem.query_emb, problem.gold_tools, problem.gold_len, problem.train_idx,
        retrieval.leakage_groups(problem.tasks, mode=mode), hidden=config.policy.hidden,
        max_steps=config.env.max_steps, vote_ks=tuple(config.policy.vote_ks),
        vote_scale=config.policy.vote_scale)
  if kind == "lm":
    from phgpo import lm_policy  # pylint: disable=g-import-not-at-top
    return lm_policy.make_lm_policy(config, problem)
  raise ValueError(f"unknown policy.kind {kind!r}; valid: 'encoder_mlp', 'retrieval_mlp', 'lm'")
