"""WebShop's pages: what each shows in the text mode, its clickables, and where each action leads.

Source: Yao et al. 2022, "WebShop", arXiv:2207.01206, sec. 3.1 (the four page types, `search[...]` / `click[...]`);
code princeton-nlp/WebShop@64fa2a5: web_agent_site/envs/web_agent_text_env.py (`WebAgentTextEnv.step`,
`get_available_actions`, `convert_html_to_text(simple=True)`, `SimServer.receive` and its page handlers),
web_agent_site/engine/engine.py (SEARCH_RETURN_N 50, PRODUCT_WINDOW 10, the button names) and
web_agent_site/templates/*.html (what each page holds, in order). Re-implemented without HTML: each page is the
list of text segments the HTML gives in WebShop's 'text' observation mode (its visible text nodes, stripped, joined
by ' [SEP] '; the HTML parser's rule is kept: a text node of only ASCII whitespace is dropped when it holds a newline
and becomes an empty segment otherwise), and the clickables in the order `get_available_actions` lists them (the
buttons, then the product links, then the option values).

  page         text segments                                            clickables
  search       WebShop, Instruction:, <instruction>, Search             search  (plus the search bar)
  results      Instruction:, <instruction>, Back to Search,             back to search, [< prev,] next >,
               Page p (Total results: n), [< Prev,] Next >,             the page's ASINs (lower case)
               per product: ASIN, Title, Price
  item         Instruction:, <instruction>, Back to Search, < Prev,     back to search, < prev, description,
               per option: name, values; Title, Price: $x, Rating: N.A.,features, reviews, [attributes,] buy now,
               Description, Features, Reviews, [Attributes,] Buy Now    the option values
  description  Instruction:, <instruction>, Back to Search, < Prev, the description      back to search, < prev
  features     ... the bullet points; reviews: none (WebShop's small mode has no reviews); attributes (with
               `show_attrs`): the attributes, category, query, product category
  done         the done page's text (thank-you line, purchased ASIN and options, score)  (none)

Actions (`act`): 'search[kw]' (any page, as WebShop's env allows it; only the search page lists it): results page 1
of the top 50 products for kw lower-cased; 'click[x]' with x (lower-cased) a clickable of the page other than
'search': 'buy now' ends the episode with the reward; 'back to search' goes to the search page and forgets the
search, product and options; 'next >' / '< prev' on results move a page (past the last page the list is empty and
'next >' stays); '< prev' on an item page returns to the results page of the last search (forgetting the options),
on a sub-page to the item page; 'description' / 'features' / 'reviews' / 'attributes' open the sub-page; an ASIN
opens its item page; an option value selects it for its option name (a value shared by two names selects the last
one, as WebShop's clickable map does). Anything else does nothing (WebShop: "if action not valid, perform
nothing"); so does 'click[search]', which WebShop lists but never performs.
Not reproduced: the search box's debugging prefixes ('<r>' random products, '<a>', '<c>', '<q>' filters) are
searched as plain words; the done page's hidden fields that WebShop leaves empty or None are kept as it renders
them.

Checked once against WebShop's templates rendered by Flask and read by BeautifulSoup the way
`convert_html_to_text(simple=True)` and `get_available_actions` read them (a scratch harness, not a test: it needs
Flask and bs4): 3,150 pages (search; results pages 1, 2, 5 and 6 of four kinds of query; item pages of the goal's or a
random product with random options; every sub-page, with and without `show_attrs`; done) give the same text and the
same clickables, in order.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, NamedTuple

from common.envs.webshop import goals as goals_lib
from common.envs.webshop import reward as reward_lib
from common.envs.webshop import search as search_lib

PRODUCT_WINDOW = 10      # products per results page (engine.py PRODUCT_WINDOW)
END_BUTTON, NEXT_PAGE, PREV_PAGE, BACK_TO_SEARCH = "buy now", "next >", "< prev", "back to search"
SUB_PAGES = ("description", "features", "reviews", "attributes")
SEARCH_TEMPLATE = "search[<your query>]"   # the search bar, as verl-agent lists it
PAGES = ("search", "results", "item") + SUB_PAGES + ("done",)
_ACTION = re.compile(r"(.+)\[(.+)\]")       # engine.py parse_action: name[arg], matched from the start
_ASCII_SPACE = frozenset(" \n\t\x0c\r")


def parse_action(action: str) -> tuple[str, str | None]:
  """(name, argument) of 'name[argument]' (greedy, from the start; text after the last ']' is ignored), else
  (action, None)."""
  m = _ACTION.match(action)
  return (action, None) if m is None else (m.group(1), m.group(2))


def _node(text: str) -> list[str]:
  """The segment(s) one HTML text node gives: none for '', none for ASCII whitespace holding a newline, '' for other
  ASCII whitespace, else the text stripped."""
  if not text:
    return []
  if all(c in _ASCII_SPACE for c in text):
    return [] if "\n" in text else [""]
  return [text.strip()]


class Shop(NamedTuple):
  """The read-only side of the environment, shared by every episode slot.

  Attributes:
    catalog: data.Catalog.
    engine: search.SearchEngine over the catalog.
    prices: ASIN -> price (goals.product_prices).
    goals: the shuffled goal list (goals.build).
    scorer: reward.Scorer.
    show_attrs: item pages have the 'Attributes' button (WebShop's `show_attrs`, off in every published setting).
  """
  catalog: Any
  engine: search_lib.SearchEngine
  prices: dict[str, float]
  goals: list[goals_lib.Goal]
  scorer: reward_lib.Scorer
  show_attrs: bool = False

  def top_products(self, keywords: str) -> list[dict]:
    """WebShop's top 50 products for a search (search.SearchEngine.search)."""
    return [self.catalog.products[i] for i in self.engine.search(keywords.lower())]


@dataclasses.dataclass
class Session:
  """One episode's state (SimServer's user session).

  Attributes:
    goal: the goals.Goal of the episode.
    page: one of PAGES.
    keywords: the last search ('' before any).
    results: the last search's top products (dicts).
    page_num: the results page (1-based).
    asin: the product whose item page (or sub-page) is open, else None.
    options: {option name: value} chosen on the open product.
    reward: the purchase's reward.RewardInfo once bought.
  """
  goal: goals_lib.Goal
  page: str = "search"
  keywords: str = ""
  results: list = dataclasses.field(default_factory=list)
  page_num: int = 1
  asin: str | None = None
  options: dict = dataclasses.field(default_factory=dict)
  reward: reward_lib.RewardInfo | None = None


def segments(shop: Shop, s: Session) -> list[str]:
  """The page's text segments (module docstring); ' [SEP] '.join of them is WebShop's text observation."""
  ins = ["Instruction:"] + _node(s.goal.instruction_text)
  if s.page == "search":
    return ["WebShop"] + ins + ["Search"]
  if s.page == "results":
    out = ins + ["Back to Search", f"Page {s.page_num} (Total results: {len(s.results)})"]
    out += (["< Prev"] if s.page_num > 1 else []) + ["Next >"]
    for p in _page_products(s):
      out += _node(p["asin"]) + _node(p["Title"]) + _node(p["Price"])
    return out
  if s.page == "done":
    return _done_segments(shop, s)
  p = shop.catalog.by_asin[s.asin]
  out = ins + ["Back to Search", "< Prev"]
  if s.page == "item":
    for name, values in p["options"].items():
      out += _node(name)
      for v in values:
        out += _node(v)
    out += _node(p["Title"]) + _node(f"Price: {p['Price']}") + _node(f"Rating: {p['Rating']}")
    return out + ["Description", "Features", "Reviews"] + (["Attributes"] if shop.show_attrs else []) + ["Buy Now"]
  if s.page == "description":
    return out + _node(p["Description"])
  if s.page == "features":
    return out + [x for b in p["BulletPoints"] for x in _node(f" {b}")]
  if s.page == "attributes":
    return (out + [x for a in p["Attributes"] for x in _node(f" {a}")] + _node(p["category"]) + _node(p["query"])
            + _node(p["product_category"]))
  return out   # reviews: WebShop's small mode has none


def _tojson(value) -> str:
  """Flask's `tojson` filter: sorted keys, ASCII, and <, >, &, ' escaped as \\u003c, \\u003e, \\u0026, \\u0027."""
  text = json.dumps(value, sort_keys=True, ensure_ascii=True)
  return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027"))


def _done_segments(shop: Shop, s: Session) -> list[str]:
  del shop
  reward = s.reward.reward if s.reward is not None else 0.0
  return (["Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)", "Purchased",
           "asin"] + _node(str(s.asin)) + ["options"] + _node(_tojson(s.options))
          + ["attrs", "None", "category", "None", "query", "None", "product category", "None", "Target", "asin",
             "options", "attrs", "price upper", "instuction text", "category", "product category", "query", "Goal",
             "None", "Reward", "Your score (min 0.0, max 1.0)", str(reward), "Reward Details", "None"])


def _page_products(s: Session) -> list[dict]:
  return s.results[(s.page_num - 1) * PRODUCT_WINDOW:s.page_num * PRODUCT_WINDOW]


def clickables(shop: Shop, s: Session) -> dict[str, tuple]:
  """clickable text (lower case) -> ('button',) | ('product', ASIN) | ('option', option name), in WebShop's order."""
  out: dict[str, tuple] = {}
  if s.page == "search":
    out["search"] = ("button",)
  elif s.page == "results":
    for b in [BACK_TO_SEARCH] + ([PREV_PAGE] if s.page_num > 1 else []) + [NEXT_PAGE]:
      out[b] = ("button",)
    for p in _page_products(s):
      out[p["asin"].lower()] = ("product", p["asin"])
  elif s.page == "item":
    names = [BACK_TO_SEARCH, PREV_PAGE, "description", "features", "reviews"]
    for b in names + (["attributes"] if shop.show_attrs else []) + [END_BUTTON]:
      out[b] = ("button",)
    for name, values in shop.catalog.by_asin[s.asin]["options"].items():
      for v in values:
        out[str(v)] = ("option", name)
  elif s.page in SUB_PAGES:
    out[BACK_TO_SEARCH] = ("button",)
    out[PREV_PAGE] = ("button",)
  return out


def admissible(shop: Shop, s: Session) -> list[str]:
  """The page's admissible actions as verl-agent lists them: 'search[<your query>]' when the page has the search
  bar, then 'click[x]' for every clickable x."""
  return ([SEARCH_TEMPLATE] if s.page == "search" else []) + [f"click[{x}]" for x in clickables(shop, s)]


class Outcome(NamedTuple):
  """What an action did: `performed` (False: WebShop performed nothing), `done` (bought)."""
  performed: bool
  done: bool


def act(shop: Shop, s: Session, action: str) -> Outcome:
  """Applies one action to the session (module docstring), WebShop's `step` without the observation.

  Raises:
    RuntimeError: the session is already done.
  """
  if s.page == "done":
    raise RuntimeError("the episode has ended (Buy Now was clicked); reset it")
  name, arg = parse_action(action)
  arg = arg.lower() if arg is not None else None
  if name == "search" and arg:
    _search(shop, s, arg, 1)
    return Outcome(True, False)
  links = clickables(shop, s)
  if name != "click" or arg not in links or arg == "search":
    return Outcome(False, False)
  if arg == END_BUTTON:
    price = shop.prices[s.asin]
    s.reward = shop.scorer(shop.catalog.by_asin[s.asin], s.goal, price, s.options)
    s.page = "done"
    return Outcome(True, True)
  if arg == BACK_TO_SEARCH:
    s.page, s.keywords, s.results, s.page_num, s.asin, s.options = "search", "", [], 1, None, {}
  elif arg == NEXT_PAGE and s.page == "results":
    s.page_num += 1
  elif arg == PREV_PAGE and s.page == "results":
    s.page_num -= 1
  elif arg == PREV_PAGE and s.page in SUB_PAGES:
    s.page = "item"
  elif arg == PREV_PAGE and s.page == "item":
    s.page, s.asin, s.options = "results", None, {}
  elif arg in SUB_PAGES:
    s.page = arg
  else:
    kind = links[arg]
    if kind[0] == "product":
      s.asin, s.options = kind[1], {}
    elif kind[0] == "option":
      s.options[kind[1].lower()] = arg
    s.page = "item"
  return Outcome(True, False)


def _search(shop: Shop, s: Session, keywords: str, page: int) -> None:
  s.page, s.keywords, s.page_num, s.asin, s.options = "results", keywords, page, None, {}
  s.results = shop.top_products(keywords)
