r"""A random admissible policy on WebShop: its success rate and score, the floor every trained row is read against.

  python -m common.envs.webshop.baseline --goals 200                  # goals 0..199 of 'valid', in this process
  python -m common.envs.webshop.baseline --goals 200 --sandboxed      # the same through a sandboxed worker
  python -m common.envs.webshop.baseline --goals 200 --seed 1 --split train --json /tmp/random.json

Policy: at every step one of the page's admissible actions (env.WebShopToolEnv: 'search[<your query>]' and the
clicks), uniformly at random (numpy default_rng(seed)); the search template is played as a search for the goal's
instruction (common.envs.base.fill_template, the rule of PlanPO's 'random' row, planpo.train.RandomAdmissible), so
"random" means random clicks on the results the instruction finds. At most `max_steps` (15) actions; an episode that
has not bought by then scores 0.
Prints: goals, success (fraction with reward 1.0), score (mean reward, in [0, 1]; the papers print it x100), mean
actions, the fraction of episodes that bought something, the mean reward of those purchases, and the wall time.
Options: --split (train | valid), --goals N (the first N goals of the split), --seed, --max_steps, --sandboxed (one
worker process under the sandbox, through common.env_pool), --data_dir (else $WEBSHOP_DATA, else the shared copy),
--json PATH (the per-episode records).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import numpy as np

from common import env_pool
from common.env_client import EnvSpec
from common.envs import base
from common.envs.webshop import env as env_lib

FACTORY = "common.envs.webshop.env:WebShopToolEnv"


def run_random(worker, task_ids, *, seed: int) -> list[dict]:
  """One random-admissible episode per task on `worker` (a common.env_pool worker: reset / step / query).

  Returns:
    Per episode: task_id, reward, won, steps, bought (a purchase happened), actions.
  """
  rng = np.random.default_rng(seed)
  out = []
  for tid in task_ids:
    worker.reset(tid, 0)
    info = worker.query("episode_info")
    instruction, acts = info["instruction"], list(info["admissible_actions"])
    actions, res = [], None
    while True:
      a = base.fill_template(acts[int(rng.integers(len(acts)))], instruction) if acts else "click[back to search]"
      res = worker.step({"name": "action", "arguments": {"action": a}})
      actions.append(a)
      acts = list(res.info.get("admissible_actions") or [])
      if res.done:
        break
    out.append({"task_id": tid, "reward": float(res.info["reward"]), "won": bool(res.info["won"]),
                "steps": len(actions), "bought": "purchased" in res.info, "actions": actions})
  return out


def summary(records: list[dict]) -> dict:
  """success, score, steps (means), bought (fraction), purchase_reward (mean reward of purchases)."""
  bought = [r["reward"] for r in records if r["bought"]]
  return {"goals": len(records), "success": float(np.mean([r["won"] for r in records])),
          "score": float(np.mean([r["reward"] for r in records])), "steps": float(np.mean([r["steps"] for r in records])),
          "bought": len(bought) / max(len(records), 1), "purchase_reward": float(np.mean(bought)) if bought else 0.0}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--goals", type=int, default=200, help="the first N goals of the split")
  p.add_argument("--split", default="valid", choices=("train", "valid"))
  p.add_argument("--seed", type=int, default=0, help="the policy's random seed")
  p.add_argument("--max_steps", type=int, default=env_lib.MAX_STEPS)
  p.add_argument("--sandboxed", action="store_true", help="run the env in a sandboxed worker process")
  p.add_argument("--data_dir", default="", help="WebShop data folder (else $WEBSHOP_DATA, else the shared copy)")
  p.add_argument("--json", default="", help="write the per-episode records here")
  a = p.parse_args(argv)
  kwargs = {"max_steps": a.max_steps, "data_dir": a.data_dir or None}
  t0 = time.time()
  if a.sandboxed:
    kwargs, ro = env_lib.prepare_host(kwargs, [])
    pool = env_pool.WorkerPool(EnvSpec(FACTORY, kwargs, ro_paths=ro), 1)
  else:
    pool = env_pool.WorkerPool.local(functools.partial(env_lib.WebShopToolEnv, **kwargs), 1)
  try:
    w = pool.workers[0]
    tasks = list(w.query("task_ids", split=a.split, limit=a.goals))
    t1 = time.time()
    records = run_random(w, tasks, seed=a.seed)
  finally:
    pool.close()
  s = summary(records)
  print(f"random admissible policy on WebShop ({len(tasks)} '{a.split}' goals {tasks[0]}..{tasks[-1]}, policy seed "
        f"{a.seed}, at most {a.max_steps} actions, {'sandboxed worker' if a.sandboxed else 'in process'}): "
        f"success {s['success']:.3f}, score {s['score']:.3f} (x100: {100 * s['success']:.1f} / {100 * s['score']:.1f}), "
        f"actions {s['steps']:.2f}, bought {s['bought']:.3f} (mean reward of a purchase {s['purchase_reward']:.3f}); "
        f"env start {t1 - t0:.1f} s, episodes {time.time() - t1:.1f} s", flush=True)
  if a.json:
    with open(a.json, "w") as f:
      json.dump({"summary": s, "args": vars(a), "episodes": records}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
