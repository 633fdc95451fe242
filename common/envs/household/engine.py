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
"""

from __future__ import annotations

import os
import random
from typing import Any


def _stack(expert: bool):
  os.environ.setdefault("ALFWORLD_DATA", os.path.join(os.environ.get("TMPDIR", "/tmp"), "alfworld_data"))
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
    self._env = _stack(expert)
    self._env.load(game_file)
    self.state = None

  def _infos(self) -> dict[str, Any]:
    out = {"won": bool(self.state["won"]), "admissible_commands": list(self.state["admissible_commands"])}
    if self.expert:
      out["expert_action"] = self.state["extra.expert_plan"][0]
    return out

  def reset(self) -> tuple[str, dict[str, Any]]:
    self.state = self._env.reset()
    return self.state["feedback"], self._infos()

  def step(self, command: str) -> tuple[str, bool, dict[str, Any]]:
    self.state, _, _ = self._env.step(command)
    infos = self._infos()
    return self.state["feedback"], infos["won"], infos

  def close(self) -> None:
    try:
      self._env.close()
    except Exception:
      pass


def solve(game_file: str, *, max_steps: int = 150, seed: int = 0) -> list[str] | None:
  """The hand-coded expert's walkthrough of a game file (its traj_data.json beside it), or None."""
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
