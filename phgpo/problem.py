"""The PhGPO problem: TRAJECT-Bench tasks, the held-out split, the tool graph, frozen embeddings, the policy.

Built once per process on the host (`prepare_problem`) and never changed by training; every stage reads it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import ml_collections
import numpy as np

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


def status_code(status: str) -> int:
  """`policy.STATUS_CODES` of an observation status; unknown statuses count as 'invalid'."""
  return policy_lib.STATUS_CODES.get(status, policy_lib.STATUS_CODES["invalid"])


def prepare_problem(config: ml_collections.ConfigDict, split: str = "random") -> Problem:
  """Loads TRAJECT-Bench, splits it, builds the graph from the training split and embeds all texts.

  Args:
    config: the PhGPO config (its data, graph, env and encoder sections).
    split: 'random' (the authors' stratified query split, `phgpo.data.split_tasks`), 'chain' (whole tool
      chains held out, `phgpo.data.split_tasks_by_chain`) or 'long' (SYNTHETIC: the random split's training
      tasks plus their composed pairs, held-out = composed pairs of held-out tasks only, 6-20 calls,
      `phgpo.long_horizon.compose_long_horizon`); one entry of config `splits`.

  Raises:
    ValueError: an unknown split.
    FileNotFoundError: the data is neither at ../shared/data/traject_bench nor at `config.data.path`
      (the message says what to download and where).
  """
  from common import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
  from phgpo import features  # pylint: disable=g-import-not-at-top

  if split not in data_lib.SPLITS:
    raise ValueError(f"unknown split {split!r} (config splits); valid: {list(data_lib.SPLITS)}")
  root = data_lib.find_traject_bench(config.data.path or None)
  logging.warning("TRAJECT-Bench data from %s", root)
  tasks = data_lib.load_tasks(root, domains=list(config.data.domains) or None)
  if config.data.max_tasks:
    rng = np.random.default_rng(config.data.split_seed)
    keep = np.sort(rng.permutation(len(tasks))[: config.data.max_tasks])
    tasks = [tasks[i] for i in keep]
  split_fn = data_lib.split_tasks_by_chain if split == "chain" else data_lib.split_tasks
  train_tasks, eval_tasks = split_fn(
      tasks, held_out_fraction=config.data.held_out_fraction, seed=config.data.split_seed)
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

  tool_specs = data_lib.load_tool_catalogue(root, tasks, scope=config.data.tool_scope)
  graph = graph_lib.build_tool_graph(
      [s.name for s in tool_specs],
      [[(c.name, c.arg_keys) for c in t.calls] for t in train_tasks],
      edges=config.graph.edges, max_templates=config.graph.max_templates,
      fallback_templates={s.name: tuple(sorted(s.required)) for s in tool_specs})

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
                 np.asarray(tool_emb, np.float32), gold_tools, gold_templates, gold_status, gold_len, split)


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
