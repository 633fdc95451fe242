"""Playing an ALFWorld game file through TextWorld's PDDL engine, wrapped exactly as ALFWorld wraps it.

`textworld.envs.PddlEnv` (TextWorld 1.7.0; Fast Downward's translator and successor generator underneath,
package `fast-downward-textworld`) loads a `game.tw-pddl`, derives every text from the game's grammar, lists
the admissible commands (applicable ground actions rendered by the grammar, sorted), answers a command that
is not admissible with "Nothing happens.", and reports `won` when the PDDL goal holds (`lost` is always
False). On top, ALFWorld's own wrappers from `alfworld.agents.environment.alfred_tw_env` (the stack that
`alfworld-generate` and AlfredTWEnv use): AlfredDemangler (THOR ids -> 'apple 1', numbering by sorted id,
no shuffling), AlfredInfos, and AlfredExpert (the hand-coded expert's next action each step).

`solve(game_file)` runs the hand-coded expert from the start with no perturbation, as alfworld-generate's
is_solvable does, and returns its walkthrough (None when the expert fails or times out). The expert breaks
ties with the global `random` module; we seed it (and restore the caller's state) so walkthroughs are
reproducible.

Threads: the engine is not thread-safe. TextWorld parses the game's grammar and every text template with
tatsu parsers that are module-level singletons (concurrent loads fail with tatsu's 'FailedToken' or
'IndexError: pop from empty list'), and fast_downward.pddl2sas sets the translator's module-level
`options`, replaces `sys.argv` and redirects `sys.stdout`. So every engine call of a process (Game load,
reset, step, close; `solve`) holds one re-entrant lock, ENGINE_LOCK. Environments in threads of one
process (common.env_pool.WorkerPool.local) thus take turns; the engine is pure Python under the GIL, so
little parallelism is lost (sandboxed workers are separate processes and run in parallel).

PDDL -> SAS translation (`fast_downward.pddl2sas`) is most of a reset's cost: PddlEnv.reset translates the
problem twice (plain and optimised) on EVERY reset, ~0.3-2 s per ALFWorld room on one CPU core.
`_install_translation_cache` (run before any game loads) wraps it once per process: `sys.argv` is restored,
and the last TRANSLATION_CACHE_SIZE results (~4-5 MB each) are memoised by (domain, problem, optimize) text.
The translation is deterministic and PddlState only reads the returned task, so a replayed reset of the
same game gives the same state and text; the second reset of a game costs only the grammar rendering
(~0.1 s). Environments in threads of one process share the memo. The expert's runs (`solve`) hold the
lock for their whole run, since they seed and draw from the global `random`.

Text rendering is most of a step's cost: after every command PddlEnv renders each admissible action and the
feedback through the game's grammar, re-parsing the same template strings with tatsu each time
(textworld.envs.pddl.textgen._parse_and_convert and textworld.logic.Rule.parse_conjunctive_query).
`_install_text_caches` memoises both parses by their text (LRU, TEXT_CACHE_SIZE entries) and hands out
deep copies (the derivation mutates its symbols): ~2.5x faster steps (53 -> 20 ms on a loaded core), with
identical observations and admissible lists (tests/planpo_household_test.py replays games both ways).
"""

from __future__ import annotations

import collections
import copy
import os
import random
import sys
import threading
from typing import Any

TRANSLATION_CACHE_SIZE = 64
TEXT_CACHE_SIZE = 8192
ENGINE_LOCK = threading.RLock()   # every engine call of the process (module docstring, "Threads")


def _install_translation_cache() -> None:
  """Wraps fast_downward.pddl2sas (which textworld's PddlState calls) with ENGINE_LOCK and an LRU memo."""
  import fast_downward
  if getattr(fast_downward.pddl2sas, "_household_cached", False):
    return
  original = fast_downward.pddl2sas
  memo: collections.OrderedDict = collections.OrderedDict()

  def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize=False):
    key = (domain, problem, bool(optimize))
    with ENGINE_LOCK:
      if key in memo and not verbose:
        memo.move_to_end(key)
        return memo[key]
      argv = sys.argv
      try:
        out = original(domain, problem, verbose=verbose, optimize=optimize)
      finally:
        sys.argv = argv
      memo[key] = out
      while len(memo) > TRANSLATION_CACHE_SIZE:
        memo.popitem(last=False)
      return out

  pddl2sas._household_cached = True
  pddl2sas.__wrapped__ = original
  fast_downward.pddl2sas = pddl2sas


def _lru(memo: collections.OrderedDict, key, make, size: int):
  """memo[key] (made by make() on a miss; the oldest entries dropped past `size`); call under a lock."""
  if key in memo:
    memo.move_to_end(key)
    return memo[key]
  value = memo[key] = make()
  while len(memo) > size:
    memo.popitem(last=False)
  return value


def _install_text_caches() -> None:
  """Memoises textworld's grammar-template and conjunctive-query parses (module docstring); idempotent."""
  from textworld.envs.pddl import textgen
  from textworld.logic import Rule
  if getattr(textgen._parse_and_convert, "_household_cached", False):
    return
  parse, query = textgen._parse_and_convert, Rule.parse_conjunctive_query.__func__
  parses: collections.OrderedDict = collections.OrderedDict()
  queries: collections.OrderedDict = collections.OrderedDict()

  def parse_and_convert(text, rule_name=None, **kw):
    with ENGINE_LOCK:
      if kw.get("trace"):
        return parse(text, rule_name=rule_name, **kw)
      return copy.deepcopy(_lru(parses, (text, rule_name), lambda: parse(text, rule_name=rule_name),
                                TEXT_CACHE_SIZE))

  def parse_conjunctive_query(cls, expr):
    with ENGINE_LOCK:
      return copy.deepcopy(_lru(queries, (cls, expr), lambda: query(cls, expr), TEXT_CACHE_SIZE))

  parse_and_convert._household_cached = True
  parse_and_convert.__wrapped__ = parse
  textgen._parse_and_convert = parse_and_convert
  Rule.parse_conjunctive_query = classmethod(parse_conjunctive_query)


def uninstall_caches() -> None:
  """Restores textworld's and fast_downward's own functions (tests compare games with and without caches)."""
  import fast_downward
  from textworld.envs.pddl import textgen
  from textworld.logic import Rule
  if getattr(fast_downward.pddl2sas, "_household_cached", False):
    fast_downward.pddl2sas = fast_downward.pddl2sas.__wrapped__
  if getattr(textgen._parse_and_convert, "_household_cached", False):
    textgen._parse_and_convert = textgen._parse_and_convert.__wrapped__
    Rule.parse_conjunctive_query = _ORIGINAL_QUERY[0]


_ORIGINAL_QUERY: list = []


_FREE_LIBS: list = []   # Fast Downward libraries of closed games, handed to the next PddlEnv (under ENGINE_LOCK)


def _install_lib_pool() -> None:
  """Makes fast_downward.load_lib reuse the libraries of closed games.

  PddlEnv.__init__ calls fast_downward.load_lib(), which copies libdownward.so (34 MB) into a temporary
  folder, loads the copy and deletes the file; nothing ever unloads it (PddlEnv.close does not). Every Game
  thus kept another 34 MB mapped: in a sandbox, whose /tmp is a size-capped tmpfs, the fourth or fifth game
  failed with 'No space left on device'. Game.close returns its library here, so a process holds at most
  as many copies as it has games open at once (one per environment). A library is made for reuse across
  games: PddlEnv.load + reset of another game on the same env loads the new problem into the same library.
  """
  import fast_downward
  if getattr(fast_downward.load_lib, "_household_pooled", False):
    return
  original = fast_downward.load_lib

  def load_lib():
    with ENGINE_LOCK:
      return _FREE_LIBS.pop() if _FREE_LIBS else original()

  load_lib._household_pooled = True
  load_lib.__wrapped__ = original
  fast_downward.load_lib = load_lib


def install_caches() -> None:
  """The translation and text caches of the module docstring and the library pool (done by every Game;
  idempotent)."""
  from textworld.logic import Rule
  if not _ORIGINAL_QUERY:
    _ORIGINAL_QUERY.append(Rule.__dict__["parse_conjunctive_query"])
  _install_translation_cache()
  _install_text_caches()
  _install_lib_pool()


def _stack(expert: bool):
  os.environ.setdefault("ALFWORLD_DATA", os.path.join(os.environ.get("TMPDIR", "/tmp"), "alfworld_data"))
  install_caches()
  import textworld
  from textworld.envs import PddlEnv
  from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

  infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"], facts=expert)
  env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
  return AlfredExpert(env, expert_type="handcoded") if expert else env


class Game:
  """One loaded game: reset() -> (observation, infos); step(command) -> (observation, won, infos).

  infos: {'won': bool, 'admissible_commands': list[str] (sorted), 'expert_action': str (only with
  expert=True)}.
  """

  def __init__(self, game_file: str, *, expert: bool = False):
    self.game_file = game_file
    self.expert = expert
    with ENGINE_LOCK:
      self._env = _stack(expert)
      self._env.load(game_file)
    self.state = None

  def _infos(self) -> dict[str, Any]:
    out = {"won": bool(self.state["won"]), "admissible_commands": list(self.state["admissible_commands"])}
    if self.expert:
      out["expert_action"] = self.state["extra.expert_plan"][0]
    return out

  def reset(self) -> tuple[str, dict[str, Any]]:
    with ENGINE_LOCK:
      self.state = self._env.reset()
      return self.state["feedback"], self._infos()

  def step(self, command: str) -> tuple[str, bool, dict[str, Any]]:
    with ENGINE_LOCK:
      self.state, _, _ = self._env.step(command)
      infos = self._infos()
      return self.state["feedback"], infos["won"], infos

  def close(self) -> None:
    with ENGINE_LOCK:
      try:
        self._env.close()
      except Exception:
        pass
      env = self._env
      while env is not None and not hasattr(env, "downward_lib"):   # the wrappers down to the PddlEnv
        env = env.__dict__.get("_wrapped_env")
      if env is not None and env.downward_lib is not None:
        _FREE_LIBS.append(env.downward_lib)   # _install_lib_pool
        env.downward_lib = None


def solve(game_file: str, *, max_steps: int = 150, seed: int = 0) -> list[str] | None:
  """The hand-coded expert's walkthrough of a game file (its traj_data.json beside it), or None."""
  with ENGINE_LOCK:
    return _solve(game_file, max_steps, seed)


def _solve(game_file: str, max_steps: int, seed: int) -> list[str] | None:
  keep = random.getstate()
  random.seed(seed)
  game = Game(game_file, expert=True)
  try:
    _, infos = game.reset()
    plan = []
    for _ in range(max_steps):
      cmd = infos["expert_action"]
      plan.append(cmd)
      _, won, infos = game.step(cmd)
      if won:
        return plan
    return None
  except Exception:   # HandCodedAgentTimeout / HandCodedAgentFailed surface as exceptions from the wrapper
    return None
  finally:
    game.close()
    random.setstate(keep)
