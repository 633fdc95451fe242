"""WebShop's goals: product prices, synthetic and human goals, the fixed goal shuffle and the splits.

Source: Yao et al. 2022, "WebShop", arXiv:2207.01206, sec. 3.1 (instructions: an attribute-bearing instruction
per product, expanded over the product's option combinations, with a price bound); code
princeton-nlp/WebShop@64fa2a5: web_agent_site/engine/engine.py `generate_product_prices`, engine/goal.py
`get_synthetic_goals` / `get_human_goals`, envs/web_agent_text_env.py `SimServer.__init__` (the shuffle).

Rules (re-implemented from the code above, one `random.Random` instead of the process-global `random`):
  price     a product with one price costs it; one with a range [lo, hi] costs uniform(lo, hi) (one draw per
            ranged product, in product-file order; 93 products here); no price: 100.
  bound     per goal-bearing product (in product order), the candidate bounds are the first 4 of 10, 20, ..., 990
            above its price; with >= 2 candidates the bound is the larger of 2 drawn without replacement
            (random.sample) and the instruction ends ", and price lower than {bound:.2f} dollars"; otherwise the
            bound is 1,000,000 and nothing is added.
  synthetic (`human_goals` False, the published setting) each of the 415 products with an instruction
            (items_ins_v2_1000.json 'instruction') gives one goal per combination of its option values
            (itertools.product over the option names sorted), instruction "<instruction> with <name>: <value>, and
            <name>: <value><price text>", attributes = its 'instruction_attributes', goal_options = {name: value}:
            6,910 goals here.
  human     (`human_goals` True) each entry of a product's 'instructions' (the crowd-sourced instruction,
            attributes and options; 13 here, all with attributes) gives one goal: instruction = the text without
            trailing '.' + price text, goal_options = its 'instruction_options' (a list of values). Entries without
            instruction attributes are skipped, as upstream.
  shuffle   the goal list is shuffled once with its own seed (`shuffle_seed`).

Seeding (the choice WebShop leaves to the caller; config keys `env.kwargs.seed`, `env.kwargs.shuffle_seed`):
WebShop's SimServer draws prices and bounds from Python's global `random` in whatever state the process is in, then
calls random.seed(233) and shuffles; verl-agent's copy (the setting GiGPO and PlanPO report) calls random.seed(seed)
before loading the products (seed 42: its env workers never pass another) and random.seed(seed) again before the
shuffle. This module reproduces the draws exactly for a given seed, in the same order (prices, then bounds, then the
shuffle), with a private random.Random(seed): `seed` = 42 and `shuffle_seed` None or -1 (= seed) give verl-agent's goal
list; shuffle_seed 233 gives the princeton SimServer's shuffle (its prices then come from `seed`). Every worker
builds the same list from the same seeds, so "goal k" is one goal in every process. Splits (verl-agent): goals
0..499 are 'valid' (its validation and reported test goals), 500.. are 'train'.

Checked once against WebShop's own code (a scratch harness, not a test: it needs thefuzz, rich and goal.py's
module-level spaCy load): `generate_product_prices` + `get_goals` + the seeded shuffle give the same prices and the
same goal list, field for field, as `build` for (seed, shuffle_seed) = (42, 42) and (0, 233), synthetic, and (42, 42)
human (13 goals).
"""

from __future__ import annotations

import itertools
import random
from typing import Any, NamedTuple, Sequence

PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
NO_BOUND = 1000000
VALID_GOALS = 500            # goals 0..499: validation; 500..: training (verl-agent's split)
SPLITS = ("train", "valid")
DEFAULT_SEED = 42            # verl-agent's WebAgentTextEnv default seed


class Goal(NamedTuple):
  """One WebShop goal (goal.py's goal dict).

  Attributes:
    asin: the instructed product.
    category, query, name, product_category: that product's fields ('name' = its Title).
    instruction_text: what the agent is told.
    attributes: the instruction's attributes (str, lower case).
    price_upper: the price bound in dollars (1,000,000: none).
    goal_options: {option name: value} (synthetic goals) or a list of values (human goals).
  """
  asin: str
  category: str
  query: str
  name: str
  product_category: str
  instruction_text: str
  attributes: tuple[str, ...]
  price_upper: float
  goal_options: Any


def product_prices(products: Sequence[dict], rng: random.Random) -> dict[str, float]:
  """ASIN -> price: pricing[0], or rng.uniform(pricing[0], pricing[1]) for a range, or 100.0 without pricing."""
  out = {}
  for p in products:
    pricing = p.get("pricing")
    if not pricing:
      price = 100.0
    elif len(pricing) == 1:
      price = float(pricing[0])
    else:
      price = rng.uniform(pricing[0], pricing[1])
    out[p["asin"]] = price
  return out


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
  """(bound, the instruction's price text) for a product costing `price` (module docstring, 'bound')."""
  candidates = [p for p in PRICE_RANGE if p > price][:4]
  if len(candidates) >= 2:
    _, upper = sorted(rng.sample(candidates, 2))
    return upper, f", and price lower than {upper:.2f} dollars"
  return NO_BOUND, ""


def synthetic_goals(products: Sequence[dict], instructions: dict[str, dict], prices: dict[str, float],
                    rng: random.Random) -> list[Goal]:
  """The synthetic goals, unshuffled (module docstring, 'synthetic').

  Raises:
    ValueError: an instructed product without instruction attributes (names the ASIN).
  """
  goals = []
  for p in products:
    ins = instructions.get(p["asin"], {})
    text = ins.get("instruction")
    if text is None:
      continue
    attrs = tuple(ins.get("instruction_attributes") or ())
    if not attrs:
      raise ValueError(f"items_ins_v2_1000.json: product {p['asin']} has an instruction but no "
                       "'instruction_attributes' (WebShop asserts there are some)")
    upper, price_text = price_bound(prices[p["asin"]], rng)
    names = sorted(p["options"])
    for combo in itertools.product(*(p["options"][n] for n in names)):
      chosen = dict(zip(names, combo))
      option_text = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
      option_text = f" with {option_text}" if option_text else ""
      goals.append(Goal(p["asin"], p["category"], p["query"], p["Title"], p["product_category"],
                        f"{text}{option_text}{price_text}", attrs, upper, chosen))
  return goals


def human_goals(products: Sequence[dict], prices: dict[str, float], rng: random.Random) -> list[Goal]:
  """The human-instruction goals, unshuffled (module docstring, 'human'): from each product's 'instructions'."""
  goals = []
  for p in products:
    for ins in p.get("instructions") or ():
      attrs = tuple(ins.get("instruction_attributes") or ())
      if not attrs:
        continue
      upper, price_text = price_bound(prices[p["asin"]], rng)
      goals.append(Goal(p["asin"], p["category"], p["query"], p["name"], p["product_category"],
                        str(ins["instruction"]).strip(".") + price_text, attrs, upper,
                        list(ins.get("instruction_options") or ())))
  return goals


def build(products: Sequence[dict], instructions: dict[str, dict], *, human: bool = False, seed: int = DEFAULT_SEED,
          shuffle_seed: int | None = None) -> tuple[dict[str, float], list[Goal]]:
  """(prices, goals): the product prices and the shuffled goal list of one setting (module docstring).

  Args:
    products: the products in file order (data.Catalog.products).
    instructions: items_ins_v2_1000.json (data.Catalog.instructions).
    human: the human-instruction goals instead of the synthetic ones (config key `env.kwargs.human_goals`).
    seed: the seed of the price and bound draws (config key `env.kwargs.seed`).
    shuffle_seed: the seed of the goal shuffle (config key `env.kwargs.shuffle_seed`); None or < 0: `seed`.
  """
  rng = random.Random(int(seed))
  prices = product_prices(products, rng)
  goals = human_goals(products, prices, rng) if human else synthetic_goals(products, instructions, prices, rng)
  random.Random(int(seed if shuffle_seed is None or shuffle_seed < 0 else shuffle_seed)).shuffle(goals)
  return prices, goals


def split_range(split: str, num_goals: int) -> range:
  """Goal indices of `split`: 'valid' = 0..499, 'train' = 500.. (both cut to the goals there are).

  Raises:
    ValueError: an unknown split, or an empty one (the human setting has 13 goals here: no 'train' goals).
  """
  if split == "valid":
    r = range(0, min(VALID_GOALS, num_goals))
  elif split == "train":
    r = range(VALID_GOALS, max(VALID_GOALS, num_goals))
  else:
    raise ValueError(f"WebShop splits are {SPLITS} (goals 0..{VALID_GOALS - 1} and {VALID_GOALS}..), got {split!r}")
  if not r:
    raise ValueError(f"WebShop split {split!r} is empty: this goal setting has {num_goals} goals and the split is goals "
                     f"{'0..499' if split == 'valid' else '500..'}; with `env.kwargs.human_goals` True (13 goals on "
                     "the 1,000-product set) use split 'valid' only")
  return r
