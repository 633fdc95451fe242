"""Small readers of ml_collections configs shared by the launcher and the trainers.

`get` reads a key from a ConfigDict, a dict or any object with attributes; `split_commas` reads a list given on
the command line as one comma-separated string (`--config.runs=grpo,planpo` on a tuple field arrives as the one
string 'grpo,planpo'); `split_list_overrides` applies it to a whole config.
"""

from __future__ import annotations

from typing import Any

import ml_collections


def get(node: Any, key: str, default: Any = None) -> Any:
  """node[key] for a ConfigDict or dict, getattr(node, key) for anything else; `default` when absent or when
  node is None."""
  if node is None:
    return default
  return node.get(key, default) if hasattr(node, "get") else getattr(node, key, default)


def split_commas(values: Any) -> tuple:
  """('a,b',), ['a,b', 'c'] or 'a,b' -> ('a', 'b'[, 'c']): comma-separated strings split, blanks dropped,
  non-strings (e.g. integer seeds) kept as they are."""
  values = [values] if isinstance(values, str) else list(values)
  out: list = []
  for v in values:
    out += [x.strip() for x in v.split(",") if x.strip()] if isinstance(v, str) else [v]
  return tuple(out)


def split_list_overrides(config: ml_collections.ConfigDict, keys: tuple[str, ...] = ("runs", "splits")) -> None:
  """Splits, in place and at any depth, every tuple field holding a comma and every string field named in
  `keys` that holds one (`split_commas`): the run and split lists of every config."""
  with config.unlocked():
    for key, value in list(config.items()):
      if isinstance(value, ml_collections.ConfigDict):
        split_list_overrides(value, keys)
      elif isinstance(value, str) and "," in value and key in keys:
        config[key] = split_commas(value)
      elif isinstance(value, (tuple, list)) and any(isinstance(v, str) and "," in v for v in value):
        config[key] = split_commas(value)


def seed_list(seeds: Any, key: str = "seeds") -> tuple[int, ...]:
  """Config `seeds` (a tuple, or the flag's comma string --config.seeds=0,1,2) as distinct non-negative ints.

  Raises:
    ValueError: naming `key`: a value that is not an integer, a negative or repeated seed, or none at all.
  """
  items = split_commas(seeds) if isinstance(seeds, (str, tuple, list)) else (seeds,)
  try:
    out = tuple(int(s) for s in items)
    bad = any(isinstance(s, bool) or (isinstance(s, float) and s != int(s)) for s in items)
  except (TypeError, ValueError):
    out, bad = (), True
  if bad or not out or min(out) < 0 or len(set(out)) != len(out):
    raise ValueError(f"config {key} must be distinct non-negative integers, e.g. --config.{key}=0,1,2; got "
                     f"{list(items)}")
  return out
