"""WebShop's 1,000-product set read in place: the processed products and the instructed attributes.

Source: Yao, Chen, Yang, Narasimhan 2022, "WebShop: Towards Scalable Real-World Web Interaction with Grounded
Language Agents", NeurIPS, arXiv:2207.01206, sec. 3.1 (products, attributes, instructions); code
princeton-nlp/WebShop@64fa2a5, web_agent_site/engine/engine.py `load_products`, `generate_product_prices`.

Files (../shared/data/webshop/README.md says where each comes from and how it was checked):
  products_1000.jsonl     one JSON object a line, {"id": ASIN, "contents": the lower-cased text WebShop's Lucene
                          index holds, "product": the dict `load_products` returns for that ASIN}, in WebShop's
                          `all_products` order (the order fixes which random draws a product's price takes);
  items_ins_v2_1000.json  ASIN -> {'attributes', and on 415 products 'instruction', 'instruction_attributes'}:
                          the synthetic goals' instructions (goals.synthetic_goals).
The 13 human instructions of this product set are the products' own 'instructions' key (goals.human_goals).
Nothing is copied or written: the folder may be read-only (it is mounted read-only into sandboxed workers).

Where the folder is (the user's data wins): the `data_dir` argument (config key `env.kwargs.data_dir`,
`--config.env.kwargs.data_dir=DIR`) when given, else $WEBSHOP_DATA when set, else the shared copy
<checkout>/../shared/data/webshop. A folder that is named explicitly is used as given or is an error (never
replaced by the shared copy).
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from common import provenance

ENV_VAR = "WEBSHOP_DATA"
PRODUCTS_FILE = "products_1000.jsonl"
INSTRUCTIONS_FILE = "items_ins_v2_1000.json"
FILES = (PRODUCTS_FILE, INSTRUCTIONS_FILE)
# sha256 of the shared copy's files (../shared/data/webshop/SHA256SUMS); another copy is accepted and its hash
# recorded (Catalog.fingerprint), so a result names the data it came from.
SHARED_SHA256 = {PRODUCTS_FILE: "24fb9257c435accee9cc82e570dc8ec76a218d3b188222a84fdeb7fc5937d00e",
                 INSTRUCTIONS_FILE: "f88a36314a397b53b3d9c3fa5878e5f7b26d35019a51ec83fbedeca61a948f6f"}
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class DataError(ValueError):
  """A WebShop data file is missing or malformed; the message names the file (and line) and the fix."""


class Catalog(NamedTuple):
  """The product set, as WebShop's engine holds it for `human_goals=False`.

  Attributes:
    products: the product dicts in file order (WebShop's `all_products`); never mutated.
    by_asin: ASIN -> product (WebShop's `product_item_dict`).
    contents: per product, the lower-cased text WebShop indexes (Title, Description, BulletPoints[0] and the
      option values; README "Search text").
    instructions: ASIN -> the items_ins_v2_1000.json entry ({'attributes', 'instruction'?,
      'instruction_attributes'?}).
    data_dir: the folder read (absolute, symlinks resolved).
    fingerprint: {file name: sha256 hex} of the files read.
  """
  products: list[dict[str, Any]]
  by_asin: dict[str, dict[str, Any]]
  contents: list[str]
  instructions: dict[str, dict[str, Any]]
  data_dir: str
  fingerprint: dict[str, str]


def shared_dir() -> str:
  """<checkout>/../shared/data/webshop (the shared copy beside the checkout)."""
  return os.path.join(os.path.dirname(_CHECKOUT), "shared", "data", "webshop")


def _missing(folder: str) -> list[str]:
  return [f for f in FILES if not os.path.isfile(os.path.join(folder, f))]


def find_data_dir(data_dir: str | None = None) -> str:
  """The WebShop data folder: `data_dir` if given, else $WEBSHOP_DATA if set, else the shared copy.

  Args:
    data_dir: a folder named by the user (config key `env.kwargs.data_dir`), or None / ''.
  Returns:
    The folder, absolute with symlinks resolved (the path a sandbox mounts read-only).
  Raises:
    FileNotFoundError: the chosen folder does not hold products_1000.jsonl and items_ins_v2_1000.json; the
      message names the folder, how it was chosen, the missing files and the key / variable to set.
  """
  if data_dir:
    folder, how = os.path.expanduser(str(data_dir)), "config key `env.kwargs.data_dir`"
  elif os.environ.get(ENV_VAR):
    folder, how = os.path.expanduser(os.environ[ENV_VAR]), f"${ENV_VAR}"
  else:
    folder, how = shared_dir(), "the default shared copy"
  missing = _missing(folder) if os.path.isdir(folder) else list(FILES)
  if missing:
    if not os.path.isdir(folder):
      where = "does not exist"
    elif not os.access(folder, os.R_OK | os.X_OK):   # e.g. a 0700 folder read by a sandboxed worker's uid
      where = (f"cannot be read by uid {os.getuid()} (sandboxed workers run as an unprivileged user: make the "
               "folder and its files world-readable, e.g. chmod -R a+rX)")
    else:
      where = f"lacks {', '.join(missing)}"
    raise FileNotFoundError(
        f"WebShop data not found: {folder} ({how}) {where}. The environment needs {' and '.join(FILES)} (WebShop's "
        "1,000-product small mode; ../shared/data/webshop/README.md says what they are and where they come from). "
        f"Put them in a folder and pass it as --config.env.kwargs.data_dir=DIR (WebShopToolEnv(data_dir=DIR)) or "
        f"set ${ENV_VAR}=DIR; without either the shared copy {shared_dir()} is read.")
  return os.path.realpath(folder)


def load_catalog(data_dir: str | None = None) -> Catalog:
  """Reads and checks the product set (find_data_dir says where).

  Raises:
    FileNotFoundError: see find_data_dir.
    DataError: a line that is not JSON, a record without 'id' / 'contents' / 'product', an id that is not the
      product's ASIN, a repeated ASIN, or a product missing from items_ins_v2_1000.json (names file and line).
  """
  folder = find_data_dir(data_dir)
  path = os.path.join(folder, PRODUCTS_FILE)
  products, contents, by_asin = [], [], {}
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        rec = json.loads(line)
        asin, text, product = rec["id"], rec["contents"], rec["product"]
      except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}, line {n}: not a {{'id', 'contents', 'product'}} record ({e}); the file must be "
                        "one JSON object a line as ../shared/data/webshop/README.md describes") from None
      if not isinstance(product, dict) or product.get("asin") != asin:
        raise DataError(f"{path}, line {n}: id {asin!r} is not the product's 'asin' "
                        f"{product.get('asin') if isinstance(product, dict) else None!r}")
      if asin in by_asin:
        raise DataError(f"{path}, line {n}: ASIN {asin} appears twice")
      products.append(product)
      contents.append(str(text))
      by_asin[asin] = product
  ipath = os.path.join(folder, INSTRUCTIONS_FILE)
  try:
    with open(ipath, encoding="utf-8") as f:
      instructions = json.load(f)
  except ValueError as e:
    raise DataError(f"{ipath}: not JSON ({e})") from None
  lost = [a for a in by_asin if a not in instructions]
  if lost:
    raise DataError(f"{ipath} has no entry for {len(lost)} products of {path} (e.g. {lost[:3]}); the two files must "
                    "come from the same product set")
  if not products:
    raise DataError(f"{path} holds no products")
  return Catalog(products, by_asin, contents, instructions, folder,
                 {PRODUCTS_FILE: provenance.file_sha256(path), INSTRUCTIONS_FILE: provenance.file_sha256(ipath)})
