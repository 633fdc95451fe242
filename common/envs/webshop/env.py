"""WebShop as a tool environment (ToolEnv surface), for serving from sandboxed worker processes.

WebShop (Yao, Chen, Yang, Narasimhan 2022, "WebShop: Towards Scalable Real-World Web Interaction with Grounded
Language Agents", NeurIPS, arXiv:2207.01206; code princeton-nlp/WebShop@64fa2a5) in its text mode over the 1,000-product
small set, offline: the data (data.py), search (search.py), goals (goals.py), reward (reward.py) and pages (pages.py)
are re-implemented from that code, each module saying how. The setting defaults are verl-agent's (Feng et al. 2025,
GiGPO, arXiv:2505.10978; PlanPO reports the same): synthetic goals (`human_goals` False), goals 0-499 'valid',
500.. 'train', at most 15 actions, success = reward 1.0, score = the reward.

Task ids: 'goal/<k>', k an index into the shuffled goal list (goals.build: the same list in every process for the same
`seed` / `shuffle_seed`). The reset seed is recorded but unused: a goal is fixed by its index.

Tool:
  action {action: str}   one WebShop action, 'search[<keywords>]' or 'click[<clickable>]' (e.g. 'click[b09qqp3356]',
                         'click[x-large]', 'click[buy now]'); the admissible actions are listed with each
                         observation ('search[<your query>]' stands for any search, as in verl-agent's prompts).
Observations (`observation_format`, config key `env.kwargs.observation_format`):
  'verl_agent' (default)  the page's text after the instruction, each segment in single quotes, joined by ' [SEP] '
                          (verl-agent's WebshopEnvironmentManager.format_obs): the instruction is shown once, apart;
  'page'                  the same without the quotes (fewer tokens for small CPU policies);
  'webshop'               WebShop's text observation verbatim ('WebShop [SEP] Instruction: [SEP] ... [SEP] Search').
reset() returns the instruction, a blank line and the first observation ('webshop': the observation alone).
Step statuses: 'ok' for an admissible action (the search template matches any 'search[...]' with a non-empty argument),
'invalid' otherwise: WebShop still performs a search from any page, and performs nothing for a click that is not on
the page or an unreadable action; 'invalid' for a malformed call too (no step counted).
Step info (JSON): task_id, goal (k), page (pages.PAGES), moves, reward = score (the purchase's reward in [0, 1]; 0
before a purchase), step_reward (the reward on the buying step, else 0), won (bought with reward 1.0), lost (False),
valid, performed (WebShop did something), admissible_actions, and after a purchase: purchased {'asin', 'options',
'price'} and reward_info (reward.RewardInfo as a dict: r_type, r_att, r_option, r_price, counts, title_score...).
Done on a purchase or after `max_steps` actions (then reward 0, not won).

Query methods (EnvClient.query; QUERY_METHODS):
  task_ids(split, games=None, limit=None)  'goal/<k>' of split 'train' or 'valid' in goal order; `games` (product
                                           categories: beauty, electronics, fashion, garden, grocery) keeps the
                                           first `limit` goals of each named category, in the order given;
  task_type(task_id)       the goal's product category (the per-type tables' label);
  gold_actions(task_id)    an expert path: search the instruction (the product's title when the instruction does not
                           find it in the top 50), 'next >' to its results page, click it, click each goal option
                           value, buy: reward 1.0 (tests/webshop_env_test.py);
  goal_info(task_id)       the goal (goals.Goal as a dict) and its product's price;
  admissible_actions()     the current page's admissible actions;
  episode_info()           {'instruction', 'observation', 'admissible_actions'}: what common.windowed shows.

Cost (2-core machine beside other jobs): construction 2-3 s (products 0.3 s, the search index 0.5-1 s, goals 0.1 s,
spaCy 1-2 s; up to ~15 s when both cores are busy, which is why spaCy loads here and not on the first purchase); a
search step ~0.5 ms, a click ~0.05 ms, a purchase ~5-30 ms (spaCy tags two titles, cached per title). Memory ~360 MB a
worker.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from common.envs import base
from common.envs.base import StepResult
from common.envs.webshop import data as data_lib
from common.envs.webshop import goals as goals_lib
from common.envs.webshop import pages
from common.envs.webshop import reward as reward_lib
from common.envs.webshop import search as search_lib

_log = logging.getLogger(__name__)

MAX_STEPS = 15     # verl-agent's WebShop max_steps (GiGPO / PlanPO)
OBSERVATION_FORMATS = ("verl_agent", "page", "webshop")
CATEGORIES = ("beauty", "electronics", "fashion", "garden", "grocery")
_TASK = re.compile(r"^goal/(\d+)$")


def prepare_host(kwargs: dict, requests) -> tuple[dict, tuple[str, ...]]:
  """`env.prepare` hook (planpo.rollouts.make_pool), run in the trusted process before sandboxed workers start:
  resolves the data folder (data.find_data_dir: `data_dir`, $WEBSHOP_DATA, the shared copy), so a missing folder
  fails here with the message naming the key, and returns (kwargs with the absolute `data_dir`, (that folder,)) for
  the sandboxes to mount read-only.

  Raises:
    FileNotFoundError: see data.find_data_dir.
  """
  del requests
  folder = data_lib.find_data_dir(kwargs.get("data_dir") or None)
  return dict(kwargs, data_dir=folder), (folder,)


class WebShopToolEnv:
  """See the module docstring.

  Args:
    data_dir: the data folder (data.find_data_dir; config key `env.kwargs.data_dir`); None / '': $WEBSHOP_DATA, else
      the shared copy.
    human_goals: the 13 human-instruction goals of this product set instead of the 6,910 synthetic ones (only the
      'valid' split then has goals).
    seed: the price and price-bound draws (goals.build; 42 = verl-agent's).
    shuffle_seed: the goal shuffle's seed; None or < 0: `seed` (verl-agent); 233: princeton's SimServer.
    max_steps: actions per episode before it ends unbought.
    observation_format: 'verl_agent', 'page' or 'webshop' (module docstring).
    analyzer, scorer: the search engine's tokenizer and BM25 lengths (search.py; 'lucene' both).
    show_attrs: item pages list an 'Attributes' button (WebShop's option, off in the published setting).
    lowercase_actions: the whole action is lower-cased before it is read (verl-agent's projection does this, so
      'Click[Buy Now]' works); False: WebShop's own env, where only the argument is lower-cased.
    shop: a pages.Shop to share (clone()); the other data arguments are then ignored.
  Raises:
    FileNotFoundError: the data folder is missing (the message names `env.kwargs.data_dir` and $WEBSHOP_DATA).
    ValueError: an unknown observation_format, analyzer or scorer (names the config key).
  """

  QUERY_METHODS = ("task_ids", "task_type", "gold_actions", "goal_info", "admissible_actions", "episode_info")

  def __init__(self, *, data_dir: str | None = None, human_goals: bool = False, seed: int = goals_lib.DEFAULT_SEED,
               shuffle_seed: int | None = None, max_steps: int = MAX_STEPS, observation_format: str = "verl_agent",
               analyzer: str = "lucene", scorer: str = "lucene", show_attrs: bool = False,
               lowercase_actions: bool = True, shop: pages.Shop | None = None):
    if observation_format not in OBSERVATION_FORMATS:
      raise ValueError(f"config `env.kwargs.observation_format` must be one of {OBSERVATION_FORMATS}, got "
                       f"{observation_format!r}")
    if int(max_steps) < 1:
      raise ValueError(f"config `env.kwargs.max_steps` must be >= 1, got {max_steps!r}")
    self.max_steps = int(max_steps)
    self.observation_format = observation_format
    self.lowercase_actions = bool(lowercase_actions)
    if shop is None:
      catalog = data_lib.load_catalog(data_dir)
      engine = search_lib.SearchEngine(catalog.contents, [p["asin"] for p in catalog.products], analyzer=analyzer,
                                       scorer=scorer)
      prices, goal_list = goals_lib.build(catalog.products, catalog.instructions, human=bool(human_goals), seed=seed,
                                          shuffle_seed=shuffle_seed)
      # spaCy is loaded here, not on the first purchase: a worker's start has a longer timeout than a step
      shop = pages.Shop(catalog, engine, prices, goal_list, reward_lib.Scorer(reward_lib.load_nlp()), bool(show_attrs))
    self.shop = shop
    self._session: pages.Session | None = None
    self._task_id: str | None = None
    self._moves = 0
    self._done = True

  # --- ToolEnv surface ---------------------------------------------------------------------

  def tools(self) -> list[dict[str, Any]]:
    return [base.action_tool("One WebShop action: search[<keywords>] on the search page, or click[<item>] for a "
                             "button, product or option listed with the observation, e.g. click[buy now].")]

  def reset(self, task_id: str, seed: int = 0) -> str:
    del seed   # a goal is fixed by its index
    k = self._goal_index(task_id)
    self._session = pages.Session(self.shop.goals[k])
    self._task_id, self._moves, self._done = f"goal/{k}", 0, False
    obs = self._observation()
    return obs if self.observation_format == "webshop" else f"{self._session.goal.instruction_text}\n\n{obs}"

  def step(self, call) -> StepResult:
    if self._session is None:
      raise RuntimeError("step() before reset(task_id, seed)")
    action, error = base.read_action(call, example="click[buy now]",
                                     tools_note="the only tool is 'action' {\"action\": <search[...] or click[...]>}.")
    if error:
      return StepResult(error, "invalid", self._done, self._info(False, False, 0.0))
    if self._done:
      raise RuntimeError(f"episode of {self._task_id} is over; call reset()")
    action = action.strip()
    if self.lowercase_actions:
      action = action.lower()
    valid = base.admits(pages.admissible(self.shop, self._session), action)
    outcome = pages.act(self.shop, self._session, action)
    self._moves += 1
    step_reward = self._session.reward.reward if outcome.done else 0.0
    self._done = outcome.done or self._moves >= self.max_steps
    info = self._info(valid, outcome.performed, step_reward)
    return StepResult(self._observation(), "ok" if valid else "invalid", self._done, info)

  def close(self) -> None:
    pass

  def clone(self) -> "WebShopToolEnv":
    """An independent episode sharing this one's products, index, goals and reward model (env_server slots)."""
    return WebShopToolEnv(max_steps=self.max_steps, observation_format=self.observation_format,
                          lowercase_actions=self.lowercase_actions, shop=self.shop)

  # --- queries -----------------------------------------------------------------------------

  def task_ids(self, split: str = "train", games: list[str] | None = None, limit: int | None = None) -> list[str]:
    """'goal/<k>' of `split` in goal order: the first `limit` (None: all), or of each category of `games`.

    Raises:
      ValueError: an unknown or empty split, or an unknown category.
    """
    r = goals_lib.split_range(split, len(self.shop.goals))
    if not games:
      ks = list(r)[:None if limit is None else int(limit)]
      return [f"goal/{k}" for k in ks]
    bad = [g for g in games if g not in CATEGORIES]
    if bad:
      raise ValueError(f"WebShop task types are the product categories {CATEGORIES}; got {bad} (config `env.games`)")
    out = []
    for g in games:
      ks = [k for k in r if self.shop.goals[k].category == g]
      out += [f"goal/{k}" for k in ks[:None if limit is None else int(limit)]]
    return out

  def task_type(self, task_id: str) -> str:
    """The goal's product category."""
    return self.shop.goals[self._goal_index(task_id)].category

  def goal_info(self, task_id: str) -> dict[str, Any]:
    """The goal (goals.Goal fields) and 'price': its product's price."""
    g = self.shop.goals[self._goal_index(task_id)]
    return dict(g._asdict(), attributes=list(g.attributes), price=self.shop.prices[g.asin])

  def gold_actions(self, task_id: str) -> list[str]:
    """An expert path to reward 1.0 (module docstring). Does not touch the current episode.

    Raises:
      ValueError: neither the instruction nor the product's title finds the product in the top 50.
    """
    g = self.shop.goals[self._goal_index(task_id)]
    for query in (g.instruction_text, self.shop.catalog.by_asin[g.asin]["Title"]):
      asins = [p["asin"] for p in self.shop.top_products(query)]
      if g.asin in asins:
        break
    else:
      raise ValueError(f"{task_id}: product {g.asin} is in the top 50 of neither its instruction nor its title")
    plan = [f"search[{query}]"] + ["click[next >]"] * (asins.index(g.asin) // pages.PRODUCT_WINDOW)
    plan.append(f"click[{g.asin.lower()}]")
    options = self.shop.catalog.by_asin[g.asin]["options"]
    values = [str(v) for vs in options.values() for v in vs]
    if isinstance(g.goal_options, dict):
      wanted = list(g.goal_options.values())
    else:   # human goals: the option value the reward's fuzzy match takes for each instructed option
      wanted = []
      for o in g.goal_options:
        best = max(values, key=lambda v, o=o: reward_lib.fuzzy(v, o), default=None)
        if best is not None and reward_lib.fuzzy(best, o) > reward_lib.MATCH_THRESHOLD:
          wanted.append(best)
    for v in wanted:
      if f"click[{v}]" not in plan:
        plan.append(f"click[{v}]")
    return plan + [f"click[{pages.END_BUTTON}]"]

  def admissible_actions(self) -> list[str]:
    return pages.admissible(self.shop, self._session) if self._session is not None else []

  def episode_info(self) -> dict[str, Any]:
    s = self._session
    return {"instruction": s.goal.instruction_text if s else "", "observation": self._observation() if s else "",
            "admissible_actions": self.admissible_actions()}

  # --- internals ---------------------------------------------------------------------------

  def _goal_index(self, task_id: str) -> int:
    m = _TASK.match(str(task_id))
    if not m:
      raise ValueError(f"WebShop task ids look like 'goal/<k>' (k in 0..{len(self.shop.goals) - 1}), got {task_id!r}")
    k = int(m.group(1))
    if k >= len(self.shop.goals):
      raise ValueError(f"{task_id!r}: this goal setting has {len(self.shop.goals)} goals (0..{len(self.shop.goals) - 1})")
    return k

  def _observation(self) -> str:
    segs = pages.segments(self.shop, self._session)
    if self.observation_format == "webshop":
      return " [SEP] ".join(segs)
    # verl-agent: the segments after the first one equal to the instruction (all of them when none is)
    task = self._session.goal.instruction_text.strip()
    rest = segs[segs.index(task) + 1:] if task in segs else segs
    if self.observation_format == "verl_agent":
      return " [SEP] ".join(f"'{x}'" for x in rest)
    return " [SEP] ".join(rest)

  def _info(self, valid: bool, performed: bool, step_reward: float) -> dict[str, Any]:
    s = self._session
    r = s.reward
    info = {"task_id": self._task_id, "goal": int(self._task_id.split("/")[1]), "page": s.page, "moves": self._moves,
            "reward": r.reward if r else 0.0, "score": r.reward if r else 0.0, "step_reward": float(step_reward),
            "won": bool(r is not None and r.reward == 1.0), "lost": False, "valid": bool(valid),
            "performed": bool(performed), "admissible_actions": self.admissible_actions()}
    if r is not None:
      info["purchased"] = {"asin": s.asin, "options": dict(s.options), "price": self.shop.prices[s.asin]}
      info["reward_info"] = r._asdict()
    return info

