"""Seeded content for the domains' generators: people, places, dates, filler text, background documents, rows.

Every function draws only from the `rng` it is given (random.Random(f"{domain}|{seed}|{level}"), see
progagent/tasks/base.py), so a generated state is a function of (domain, seed, level) alone.
"""

from __future__ import annotations

import datetime
import itertools
import random
from typing import Any, Mapping, Sequence

from progagent.tasks import base

FIRST = ("Ada Alan Alma Amir Anna Aris Ava Ben Bruno Carla Chen Clara Dara Dev Diego Elena Emil Eva Farah Felix "
         "Gia Hana Hugo Ines Ivan Jae Jana Joel Kai Kira Lars Lea Leo Lina Luca Maya Mei Milo Nadia Noah Nora "
         "Olga Omar Otto Pia Priya Quinn Rafa Rosa Sami Sara Sven Tara Theo Uma Vera Wen Yara Yusuf Zoe").split()
LAST = ("Abbott Alvarez Baker Banerjee Berg Brandt Castro Chowdhury Costa Dalton Diaz Dubois Eriksen Fischer "
        "Fontaine Garcia Haddad Hansen Ibarra Ito Jensen Kaur Keller Kowalski Larsen Lopez Marsh Meyer Moreau "
        "Nakamura Novak Okafor Olsen Park Patel Quist Rossi Ruiz Sato Schmidt Silva Sousa Tanaka Torres Ueda "
        "Varga Vogel Wagner Walsh Weber Xu Yamada Young Zhang Ziegler").split()
CITIES = ("Lisbon", "Porto", "Madrid", "Lyon", "Berlin", "Oslo", "Krakow", "Dublin")
WORDS = ("quarterly review process update customer policy system record report schedule budget account "
         "team project meeting note summary item request status change data backlog migration vendor "
         "contract invoice audit feedback training release plan risk issue metric target milestone").split()


def unique_names(rng: random.Random, k: int, *, exclude: Sequence[str] = ()) -> list[str]:
  """k distinct 'First Last' names (a middle initial is added once the 3,600 pairs run out).

  Args:
    rng: the generator's random source.
    k: how many names.
    exclude: names not to return.
  Returns:
    list[str] of length k, all distinct.
  """
  pairs = [f"{a} {b}" for a, b in itertools.product(FIRST, LAST) if f"{a} {b}" not in set(exclude)]
  rng.shuffle(pairs)
  out = pairs[:k]
  i = 0
  while len(out) < k:
    a, b = pairs[i % len(pairs)].split()
    out.append(f"{a} {chr(65 + (i // len(pairs)) % 26)}. {b}")
    i += 1
  return out


def email_of(name: str, i: int, domain: str = "example.org") -> str:
  """An e-mail address made from a name and a number: email_of('Ada Berg', 7) == 'a.berg7@example.org'."""
  parts = name.lower().replace(".", "").split()
  return f"{parts[0][0]}.{parts[-1]}{i}@{domain}"


def rand_date(rng: random.Random, start: str = "2024-01-01", end: str = "2024-06-30") -> str:
  """A uniform date in [start, end] (both ISO 'YYYY-MM-DD'), ISO format."""
  a = datetime.date.fromisoformat(start)
  b = datetime.date.fromisoformat(end)
  return (a + datetime.timedelta(days=rng.randint(0, (b - a).days))).isoformat()


def sentence(rng: random.Random, n: int = 12) -> str:
  """n words from WORDS, capitalised, with a final full stop (no comma, colon or quote inside)."""
  w = [rng.choice(WORDS) for _ in range(n)]
  return " ".join(w).capitalize() + "."


def write_docs(ctx: base.Ctx, rng: random.Random, domain: str, topics: Sequence[str]) -> None:
  """The FIXED_DOCS background documents of a workspace (README + policies/notes), ~1-2 KB each.

  Args:
    ctx: the episode state being generated.
    rng: the generator's random source.
    domain: the domain's name (each document's title starts with it).
    topics: names of docs/<topic>.md; notes_<i>.md fill up to base.FIXED_DOCS documents.
  """
  names = ["README.md"] + [f"docs/{t}.md" for t in topics]
  names += [f"docs/notes_{i}.md" for i in range(base.FIXED_DOCS - len(names))]
  for nm in names[:base.FIXED_DOCS]:
    title = nm.rsplit("/", 1)[-1].removesuffix(".md").replace("_", " ")
    body = "\n\n".join(" ".join(sentence(rng) for _ in range(4)) for _ in range(rng.randint(3, 6)))
    ctx.write(nm, f"# {domain}: {title}\n\n{body}\n")


def insert_rows(ctx: base.Ctx, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
  """Bulk insert of dict rows (all with the same keys, those of rows[0]) into `table`; nothing for no rows."""
  if not rows:
    return
  cols = list(rows[0])
  ctx.conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                       [tuple(r[c] for c in cols) for r in rows])
