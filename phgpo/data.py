"""TRAJECT-Bench loader: tasks with ordered gold tool calls, the tool catalogue, a stratified split.

Data: TRAJECT-Bench (He et al. 2025, github.com/PengfeiHePower/TRAJECT-Bench, MIT licence), the sequential
set: `sequential/<Domain>/traj_query.json` (1,670 user queries in 9 domains, each with 3-10 ordered gold
calls, their argument values, execution status and recorded output) and `tools/<Domain>_tool.json` (the
tool catalogue). The files are read in place; nothing is copied.

Choices the dataset leaves open (each stated where it is made):
- `Task.task_id` is f"{domain}/{index}", index = position in that domain's traj_query.json.
- `ToolCall.arguments` merges the call's required and optional parameters (names never collide in the
  data); `ToolCall.status` keeps the dataset's execution_status ('success' or 'failed').
- The catalogue files overlap (one tool may appear in several domain files, sometimes with different
  descriptions): the entry from the file of its own "domain name" wins, else the first in sorted file order.
- Tools that gold calls use but the catalogue lacks (35 names, 545 calls in the released data) are added
  from the tasks' tool lists: description from the first call, parameter types inferred from the values.
- `load_tool_catalogue(scope='used')` (default) keeps the tools that the given tasks call (381 for the
  whole sequential set, the action space of the PhGPO authors' graph); scope='all' keeps the whole
  catalogue plus the task-only tools. Config key: `data.tool_scope`.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import zlib
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from absl import logging

UPSTREAM_URL = "https://github.com/PengfeiHePower/TRAJECT-Bench"
ENV_VAR = "TRAJECT_BENCH_DIR"
TOOL_SCOPES = ("used", "all")

# Catalogue parameter types -> JSON-schema fragments.
_SCHEMA_TYPES = {
    "STRING": {"type": "string"},
    "NUMBER": {"type": "number"},
    "BOOLEAN": {"type": "boolean"},
    "ENUM": {"type": "string"},
    "DATE (YYYY-MM-DD)": {"type": "string", "format": "date"},
}


class DataError(ValueError):
  """A TRAJECT-Bench file that does not have the expected structure."""


@dataclasses.dataclass(frozen=True)
class ToolCall:
  """One gold (recorded) tool call.

  Attributes:
    name: tool name, "<parent tool>: <API name>", as in the catalogue.
    arguments: {parameter name: value} (required and optional merged; values str/int/float/bool/dict).
    arg_keys: sorted parameter names: the call's argument-key set (its "argument template").
    status: the dataset's execution_status, 'success' or 'failed'.
    output: the recorded output (a string, possibly truncated by the dataset).
  """
  name: str
  arguments: Mapping[str, Any]
  arg_keys: tuple[str, ...]
  status: str
  output: str


@dataclasses.dataclass(frozen=True)
class Task:
  """One user query with its ordered gold calls.

  Attributes:
    task_id: f"{domain}/{index}", stable across runs.
    domain: the domain folder name, e.g. 'Finance'.
    query: the user's request.
    calls: the ordered gold calls.
    final_answer: the dataset's reference answer text (final_answer['answer']).
  """
  task_id: str
  domain: str
  query: str
  calls: tuple[ToolCall, ...]
  final_answer: str

  @property
  def tool_names(self) -> tuple[str, ...]:
    return tuple(c.name for c in self.calls)


@dataclasses.dataclass(frozen=True)
class ToolSpec:
  """One tool of the action space.

  Attributes:
    name: unique tool name.
    description: the catalogue description (or the first gold call's description for task-only tools).
    domain: the tool's domain.
    required: required parameter names, in catalogue order.
    optional: optional parameter names, in catalogue order (plus names only gold calls use).
    input_schema: JSON schema of the arguments, MCP `inputSchema` form:
      {'type': 'object', 'properties': {name: {'type': ..., 'description': ...}}, 'required': [...]}.
    source: 'catalogue' or 'tasks' (added from the gold calls because the catalogue lacks it).
  """
  name: str
  description: str
  domain: str
  required: tuple[str, ...]
  optional: tuple[str, ...]
  input_schema: Mapping[str, Any]
  source: str = "catalogue"

  def mcp(self) -> dict[str, Any]:
    """The MCP `tools/list` entry: {'name', 'description', 'inputSchema'}."""
    return {"name": self.name, "description": self.description,
            "inputSchema": json.loads(json.dumps(self.input_schema))}


# ----------------------------------------------------------------------------- locating the data


def repo_root() -> pathlib.Path:
  """The repository root: the nearest folder above this file that holds setup.cfg."""
  here = pathlib.Path(__file__).resolve()
  for parent in here.parents:
    if (parent / "setup.cfg").is_file():
      return parent
  return here.parents[1]


def _default_shared_dir() -> pathlib.Path:
  return repo_root().parent / "shared" / "data" / "traject_bench"


def _check_layout(root: pathlib.Path) -> str | None:
  """None when `root` looks like TRAJECT-Bench, else what is missing."""
  if not root.is_dir():
    return "no such folder"
  if not any(root.glob("sequential/*/traj_query.json")):
    return "no sequential/<Domain>/traj_query.json inside"
  if not any(root.glob("tools/*_tool.json")):
    return "no tools/<Domain>_tool.json inside"
  return None


def resolve_data_dir(path: str | os.PathLike | None = None) -> tuple[pathlib.Path, str]:
  """Which folder the data comes from, and why: the user's data wins.

  The first place that is given is used as given: `path` (the launcher's --data_dir, config `data.path`), then
  $TRAJECT_BENCH_DIR; only when neither is given, the shared copy `<repo root>/../shared/data/traject_bench`.
  Nothing is checked here (see `find_traject_bench`).

  Args:
    path: a folder given by the user, or None / '' (not given).
  Returns:
    (the folder, expanded but not resolved; a label naming where it came from: 'given path (--data_dir,
    config data.path)', '$TRAJECT_BENCH_DIR' or 'shared data folder').
  """
  if path:
    return pathlib.Path(path).expanduser(), "given path (--data_dir, config data.path)"
  env = os.environ.get(ENV_VAR)
  if env:
    return pathlib.Path(env).expanduser(), f"${ENV_VAR}"
  return _default_shared_dir(), "shared data folder"


def find_traject_bench(path: str | os.PathLike | None = None) -> pathlib.Path:
  """Locates the TRAJECT-Bench folder: the user's data wins over the shared copy.

  `path` (the launcher's --data_dir, config `data.path`) when given, else $TRAJECT_BENCH_DIR when set, else
  `<repo root>/../shared/data/traject_bench` (`resolve_data_dir`). A folder the user gave is used as given:
  when it does not hold `sequential/<Domain>/traj_query.json` and `tools/<Domain>_tool.json`, that is an error,
  and the shared copy is never used in its place. (Before issue 30 the shared copy came first and a given path
  was only a fallback.) When both `path` and $TRAJECT_BENCH_DIR are given and differ, `path` wins and a warning
  says the variable is not used.

  Args:
    path: a folder given by the user, or None / '' (not given).
  Returns:
    The resolved folder.
  Raises:
    FileNotFoundError: the chosen folder does not hold the data; the message names it, where the choice came
      from, and says what to download and where to put it.
  """
  cand, label = resolve_data_dir(path)
  env = os.environ.get(ENV_VAR)
  if path and env and pathlib.Path(env).expanduser().resolve() != cand.resolve():
    logging.warning("TRAJECT-Bench: the given path %s wins; $%s=%s is not used", path, ENV_VAR, env)
  problem = _check_layout(cand)
  if problem is None:
    logging.info("TRAJECT-Bench data: %s (%s)", cand.resolve(), label)
    return cand.resolve()
  given = label != "shared data folder"
  note = (f"(a given folder is used as given: the shared copy {_default_shared_dir()} is the default only when "
          f"neither --data_dir / config data.path nor ${ENV_VAR} is given)\n" if given else
          f"(no --data_dir / config data.path and no ${ENV_VAR} given)\n")
  raise FileNotFoundError(
      "TRAJECT-Bench data not found. Looked at:\n" + f"  {label}: {cand} ({problem})\n" + note +
      f"To fix: download {UPSTREAM_URL} (e.g. `git clone --depth 1 {UPSTREAM_URL}.git`; tested at commit "
      "2723fd890778dbfb6af9e3aa8ee1c22272979468) and copy two folders from its public_data/:\n"
      "  public_data/sequential/<Domain>/traj_query.json  (one folder per domain)\n"
      "  public_data/tools/                                (the <Domain>_tool.json catalogue files)\n"
      f"to {cand}/ so that {cand}/sequential/Finance/traj_query.json and {cand}/tools/Finance_tool.json "
      f"exist" + ("" if given else f"; or put them anywhere and pass that folder as --data_dir (config data.path) "
                  f"or set ${ENV_VAR}") + ".")


# ----------------------------------------------------------------------------- tasks


def _fail(file: pathlib.Path, index: int | None, msg: str) -> DataError:
  where = f"{file}" + (f", task {index}" if index is not None else "")
  return DataError(f"{where}: {msg}. Re-download the file from {UPSTREAM_URL} (public_data/).")


def _params(file, index, call_pos, call, key) -> list[tuple[str, Any]]:
  params = call.get(key, [])
  if not isinstance(params, list):
    raise _fail(file, index, f"call {call_pos}: {key!r} must be a list, got {type(params).__name__}")
  out = []
  for p in params:
    if not isinstance(p, dict) or not isinstance(p.get("name"), str) or "value" not in p:
      raise _fail(file, index, f"call {call_pos}: each entry of {key!r} must be {{'name': str, 'value': ...}}, "
                  f"got {p!r:.80}")
    out.append((p["name"], p["value"]))
  return out


def _parse_call(file: pathlib.Path, index: int, pos: int, call: Any) -> ToolCall:
  if not isinstance(call, dict):
    raise _fail(file, index, f"call {pos} must be an object, got {type(call).__name__}")
  name = call.get("tool name")
  if not isinstance(name, str) or not name:
    raise _fail(file, index, f"call {pos} has no 'tool name'")
  args = dict(_params(file, index, pos, call, "required parameters")
              + _params(file, index, pos, call, "optional parameters"))
  status = call.get("execution_status", "success")
  if status not in ("success", "failed"):
    raise _fail(file, index, f"call {pos}: execution_status must be 'success' or 'failed', got {status!r}")
  output = call.get("executed_output", "")
  if not isinstance(output, str):
    output = json.dumps(output, ensure_ascii=False, default=str)
  return ToolCall(name=name, arguments=args, arg_keys=tuple(sorted(args)), status=status, output=output)


def _parse_task(file: pathlib.Path, domain: str, index: int, raw: Any) -> Task:
  if not isinstance(raw, dict):
    raise _fail(file, index, f"must be an object, got {type(raw).__name__}")
  query = raw.get("query")
  if not isinstance(query, str) or not query.strip():
    raise _fail(file, index, "missing or empty 'query'")
  calls = raw.get("tool list")
  if not isinstance(calls, list) or not calls:
    raise _fail(file, index, "missing or empty 'tool list' (the gold calls)")
  answer = raw.get("final_answer", "")
  if isinstance(answer, dict):
    answer = answer.get("answer", "")
  if not isinstance(answer, str):
    raise _fail(file, index, f"'final_answer' must be a string or {{'answer': str}}, got {type(answer).__name__}")
  return Task(task_id=f"{domain}/{index}", domain=domain, query=query,
              calls=tuple(_parse_call(file, index, i, c) for i, c in enumerate(calls)), final_answer=answer)


def available_domains(root: str | os.PathLike) -> list[str]:
  """Domain folders that hold a sequential/<Domain>/traj_query.json, sorted."""
  return sorted(p.parent.name for p in pathlib.Path(root).glob("sequential/*/traj_query.json"))


def load_tasks(root: str | os.PathLike, *, domains: Iterable[str] | None = None) -> list[Task]:
  """Loads the sequential tasks.

  Args:
    root: the TRAJECT-Bench folder (see `find_traject_bench`).
    domains: domain names to load; None loads all.
  Returns:
    Tasks ordered by domain (sorted by name) then file position.
  Raises:
    ValueError: an unknown domain (the message lists the available ones).
    DataError: a malformed file; the message names the file and the task index.
  """
  root = pathlib.Path(root)
  avail = available_domains(root)
  if not avail:
    raise FileNotFoundError(f"{root} holds no sequential/<Domain>/traj_query.json; see find_traject_bench().")
  if domains is None:
    chosen = avail
  else:
    chosen = sorted(set(domains))
    unknown = [d for d in chosen if d not in avail]
    if unknown:
      raise ValueError(f"unknown domain(s) {unknown}; available in {root}: {avail}")
  tasks = []
  for domain in chosen:
    file = root / "sequential" / domain / "traj_query.json"
    try:
      raw = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
      raise _fail(file, None, f"not valid JSON ({e})") from e
    if not isinstance(raw, list):
      raise _fail(file, None, f"must hold a JSON list of tasks, got {type(raw).__name__}")
    tasks.extend(_parse_task(file, domain, i, t) for i, t in enumerate(raw))
  return tasks


# ----------------------------------------------------------------------------- tool catalogue


def _schema_of_type(type_name: Any) -> dict[str, Any]:
  if isinstance(type_name, str):
    hit = _SCHEMA_TYPES.get(type_name) or _SCHEMA_TYPES.get(type_name.upper())
    if hit:
      return dict(hit)
  return {"type": "string"}


def _coerce_default(value: Any, json_type: str) -> Any:
  """The catalogue's default in the schema's type, or None (defaults are mostly strings, often '')."""
  if value is None or value == "":
    return None
  if json_type == "number" and isinstance(value, str):
    try:
      return int(value) if value.strip().lstrip("-").isdigit() else float(value)
    except ValueError:
      return None
  if json_type == "boolean" and isinstance(value, str):
    return {"true": True, "false": False}.get(value.strip().lower())
  return value


def _schema_of_value(value: Any) -> dict[str, Any]:
  if isinstance(value, bool):
    return {"type": "boolean"}
  if isinstance(value, (int, float)):
    return {"type": "number"}
  if isinstance(value, dict):
    return {"type": "object"}
  if isinstance(value, list):
    return {"type": "array"}
  return {"type": "string"}


def _read_catalogue(root: pathlib.Path) -> dict[str, dict]:
  """name -> chosen raw catalogue entry (the one in its own domain's file wins)."""
  chosen: dict[str, tuple[bool, dict]] = {}
  files = sorted((root / "tools").glob("*_tool.json"))
  for file in files:
    stem = file.name[:-len("_tool.json")]
    try:
      entries = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
      raise _fail(file, None, f"not valid JSON ({e})") from e
    if not isinstance(entries, list):
      raise _fail(file, None, f"must hold a JSON list of tools, got {type(entries).__name__}")
    for i, e in enumerate(entries):
      if not isinstance(e, dict) or not isinstance(e.get("tool name"), str):
        raise DataError(f"{file}, tool {i}: must be an object with a 'tool name'")
      own = e.get("domain name") == stem
      prev = chosen.get(e["tool name"])
      if prev is None or (own and not prev[0]):
        chosen[e["tool name"]] = (own, e)
  return {name: e for name, (_, e) in chosen.items()}


def _spec_from_catalogue(entry: dict, extra: Mapping[str, Any]) -> ToolSpec:
  props: dict[str, Any] = {}
  req, opt = [], []
  for key, names in (("required_parameters", req), ("optional_parameters", opt)):
    for p in entry.get(key) or []:
      if not isinstance(p, dict) or not isinstance(p.get("name"), str) or p["name"] in props:
        continue
      s = _schema_of_type(p.get("type"))
      if p.get("description"):
        s["description"] = str(p["description"]).strip()
      default = _coerce_default(p.get("default"), s["type"])
      if default is not None:
        s["default"] = default
      props[p["name"]] = s
      names.append(p["name"])
  for name, value in extra.items():  # names that gold calls use but the catalogue omits
    if name not in props:
      props[name] = {**_schema_of_value(value), "description": "(seen in the recorded calls)"}
      opt.append(name)
  return ToolSpec(name=entry["tool name"], description=str(entry.get("tool description", "")).strip(),
                  domain=str(entry.get("domain name", "")), required=tuple(req), optional=tuple(opt),
                  input_schema={"type": "object", "properties": props, "required": list(req)})


def _spec_from_calls(name: str, domain: str, description: str, raw_calls: list[dict]) -> ToolSpec:
  props: dict[str, Any] = {}
  order: list[str] = []
  required_sets = []
  for call in raw_calls:
    req = {p["name"] for p in call.get("required parameters", [])}
    required_sets.append(req)
    for p in call.get("required parameters", []) + call.get("optional parameters", []):
      if p["name"] not in props:
        props[p["name"]] = _schema_of_value(p["value"])
        order.append(p["name"])
  always = set.intersection(*required_sets) if required_sets else set()
  req = [n for n in order if n in always]
  return ToolSpec(name=name, description=description.strip(), domain=domain, required=tuple(req),
                  optional=tuple(n for n in order if n not in always),
                  input_schema={"type": "object", "properties": props, "required": req}, source="tasks")


def _raw_gold_calls(root: pathlib.Path, tasks: Sequence[Task]) -> dict[str, list[tuple[str, dict]]]:
  """name -> [(domain, raw call dict)] for the given tasks, in task order (raw dicts keep param lists)."""
  wanted = {t.task_id for t in tasks}
  out: dict[str, list[tuple[str, dict]]] = collections.defaultdict(list)
  for domain in sorted({t.domain for t in tasks}):
    file = root / "sequential" / domain / "traj_query.json"
    for i, raw in enumerate(json.loads(file.read_text(encoding="utf-8"))):
      if f"{domain}/{i}" in wanted:
        for c in raw["tool list"]:
          out[c["tool name"]].append((domain, c))
  return out


def load_tool_catalogue(root: str | os.PathLike, tasks: Sequence[Task] | None = None, *,
                        scope: str = "used") -> list[ToolSpec]:
  """Loads the tool catalogue and checks it against the gold calls.

  Every gold call's tool name is looked up in the catalogue; names the catalogue lacks are added from the
  tasks' tool lists (source='tasks'), and parameter names gold calls use but the catalogue omits are
  added to that tool's optional parameters. Both counts are logged (absl/python logging, INFO).

  Args:
    root: the TRAJECT-Bench folder.
    tasks: the tasks whose gold calls define the used tools; None loads all tasks. Pass the train and
      held-out tasks together so that the action space covers every gold tool.
    scope: 'used' (default): only the tools the tasks call; 'all': the whole catalogue plus task-only
      tools. Config key: `data.tool_scope`.
  Returns:
    ToolSpecs sorted by name (the tool index order used everywhere else).
  Raises:
    ValueError: an unknown scope. DataError: a malformed catalogue file.
  """
  if scope not in TOOL_SCOPES:
    raise ValueError(f"scope must be one of {TOOL_SCOPES} (config key data.tool_scope), got {scope!r}")
  root = pathlib.Path(root)
  if tasks is None:
    tasks = load_tasks(root)
  catalogue = _read_catalogue(root)
  gold = _raw_gold_calls(root, tasks)
  specs: dict[str, ToolSpec] = {}
  added_params = 0
  for name, uses in gold.items():
    if name in catalogue:
      known = {p.get("name") for k in ("required_parameters", "optional_parameters")
               for p in catalogue[name].get(k) or [] if isinstance(p, dict)}
      extra = {}
      for _, c in uses:
        for p in c.get("required parameters", []) + c.get("optional parameters", []):
          if p["name"] not in known and p["name"] not in extra:
            extra[p["name"]] = p["value"]
      added_params += len(extra)
      specs[name] = _spec_from_catalogue(catalogue[name], extra)
    else:
      domain, first = uses[0]
      specs[name] = _spec_from_calls(name, domain, str(first.get("tool description", "")), [c for _, c in uses])
  num_added = sum(s.source == "tasks" for s in specs.values())
  logging.info("tool catalogue: %d catalogue tools; %d tools used by %d tasks, of which %d are missing from "
               "the catalogue and were added from the tasks' tool lists; %d parameter names added from gold calls",
               len(catalogue), len(specs), len(tasks), num_added, added_params)
  if scope == "all":
    for name, entry in catalogue.items():
      if name not in specs:
        specs[name] = _spec_from_catalogue(entry, {})
  return [specs[n] for n in sorted(specs)]


# ----------------------------------------------------------------------------- split and summary


def _hold_out_by_domain(tasks: Sequence[Task], unit, *, held_out_fraction: float, seed: int,
                        caller: str) -> tuple[list[Task], list[Task]]:
  """The shared rule of both splits: per domain, round(held_out_fraction * units) of the domain's distinct
  units (sorted) go to the held-out set, drawn by a permutation seeded by (seed, crc32(domain)); a task is
  held out with its unit. `unit(task)` is a sortable key (the task id, or the gold tool chain)."""
  if not 0.0 <= held_out_fraction < 1.0:
    raise ValueError(f"held_out_fraction must be in [0, 1) (config key data.held_out_fraction), "
                     f"got {held_out_fraction}")
  ids = [t.task_id for t in tasks]
  if len(set(ids)) != len(ids):
    raise ValueError(f"duplicate task ids; {caller} needs each task once")
  by_domain: dict[str, set] = collections.defaultdict(set)
  for t in tasks:
    by_domain[t.domain].add(unit(t))
  held: set = set()
  for domain, units in by_domain.items():
    units = sorted(units)
    n_held = int(np.floor(held_out_fraction * len(units) + 0.5))
    rng = np.random.default_rng([seed, zlib.crc32(domain.encode())])
    held.update((domain, units[i]) for i in rng.permutation(len(units))[:n_held])
  is_held = [(t.domain, unit(t)) in held for t in tasks]
  return [t for t, h in zip(tasks, is_held) if not h], [t for t, h in zip(tasks, is_held) if h]


def split_tasks(tasks: Sequence[Task], *, held_out_fraction: float = 0.2,
                seed: int = 0) -> tuple[list[Task], list[Task]]:
  """Splits tasks into train and held-out sets, stratified by domain.

  In each domain, round(held_out_fraction * n_domain) tasks go to the held-out set, drawn by a
  permutation seeded by (seed, crc32(domain)); a domain's split therefore does not depend on which other
  domains are loaded, nor on the input order (tasks are sorted by task_id first).

  Args:
    tasks: the tasks to split (task_ids unique).
    held_out_fraction: in [0, 1). Config key: `data.held_out_fraction`.
    seed: split seed. Config key: `data.split_seed`.
  Returns:
    (train, held_out), each in input order.
  Raises:
    ValueError: a fraction outside [0, 1) or duplicate task ids.
  """
  return _hold_out_by_domain(tasks, lambda t: t.task_id, held_out_fraction=held_out_fraction, seed=seed,
                             caller="split_tasks")


SPLITS = ("random", "chain", "long")
def split_tasks_by_chain(tasks: Sequence[Task], *, held_out_fraction: float = 0.2,
                         seed: int = 0) -> tuple[list[Task], list[Task]]:
  """Splits tasks so that whole gold tool chains are held out, stratified by domain.

  A chain is the sequence of tool names a task's gold trajectory calls; TRAJECT-Bench asks each chain through
  several queries, so under the query split (`split_tasks`) every held-out chain also occurs in training.
  Here, in each domain, round(held_out_fraction * chains in the domain) chains go to the held-out set with
  every query that asks them, drawn by a permutation seeded by (seed, crc32(domain)) over the sorted chains.
  The held-out share of tasks is therefore near, not exactly, held_out_fraction. Selected by config `splits`
  (value 'chain'); the fraction and seed are `data.held_out_fraction` and `data.split_seed`.

  Args:
    tasks: the tasks to split (task_ids unique).
    held_out_fraction: in [0, 1).
    seed: split seed.
  Returns:
    (train, held_out), each in input order; no held-out chain occurs in train.
  Raises:
    ValueError: a fraction outside [0, 1) or duplicate task ids.
  """
  return _hold_out_by_domain(tasks, lambda t: tuple(c.name for c in t.calls),
                             held_out_fraction=held_out_fraction, seed=seed, caller="split_tasks_by_chain")


def dataset_summary(tasks: Sequence[Task], tools: Sequence[ToolSpec] | None = None) -> dict[str, Any]:
  """Counts for logs and reports: tasks per domain, calls per task, unique tools used, failed calls."""
  lengths = collections.Counter(len(t.calls) for t in tasks)
  used = {c.name for t in tasks for c in t.calls}
  out = {
      "num_tasks": len(tasks),
      "tasks_per_domain": dict(sorted(collections.Counter(t.domain for t in tasks).items())),
      "num_calls": sum(len(t.calls) for t in tasks),
      "calls_per_task": dict(sorted(lengths.items())),
      "mean_calls_per_task": float(np.mean([len(t.calls) for t in tasks])) if tasks else 0.0,
      "unique_tools_used": len(used),
      "failed_calls": sum(c.status == "failed" for t in tasks for c in t.calls),
      "tasks_with_repeated_tool": sum(len(set(t.tool_names)) < len(t.calls) for t in tasks),
  }
  if tools is not None:
    out["num_tools"] = len(tools)
    out["tools_from_tasks"] = sum(s.source == "tasks" for s in tools)
    out["used_tools_missing_from_tools"] = len(used - {s.name for s in tools})
  return out
