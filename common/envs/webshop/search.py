r"""WebShop's search engine: BM25 over the products' indexed text, ranked as its Lucene index ranks them.

bm25s and PyStemmer (PyPI) stand in for pyserini / Lucene, which need a Java runtime and a 140 MB wheel.

WebShop (Yao et al. 2022, arXiv:2207.01206, sec. 3.1 "search engine"; code princeton-nlp/WebShop@64fa2a5,
search_engine/ and web_agent_site/engine/engine.py `get_top_n_product_from_keywords`) indexes each product's
`' '.join([Title, Description, BulletPoints[0], option values]).lower()` with pyserini (Lucene 9.5, Anserini's
defaults) and answers a search with `LuceneSearcher.search(keywords, k=50)`: BM25 with k1 = 0.9, b = 0.4 over
Anserini's English analyzer (standard tokenizer, English possessive filter, lower case, Lucene's 33 English stop
words, Porter stemmer), bag-of-words query (a term repeated in the query counts that many times), hits ordered by
score with ties broken by the ASIN, at most 50 hits, and only documents that share a term with the query.

Here: the same text (data.Catalog.contents, byte-identical to the indexed field), the 33 stop words (bm25s's English
list is Lucene's), PyStemmer's 'porter' (Snowball's original Porter algorithm) with the three places where Lucene's
Porter stemmer departs from it put back (`lucene_porter`; words of 1-2 letters are not stemmed), Lucene's BM25
    score(q, d) = sum over query terms t (with repeats) of idf(t) * tf / (tf + k1 (1 - b + b |d| / avgdl)),
    idf(t) = log(1 + (N - n_t + 0.5) / (n_t + 0.5)),  k1 = 0.9, b = 0.4,
and the hits (score > 0) ranked by (score desc, ASIN asc), top 50. Two choices, config keys `env.kwargs.*`:
  analyzer  'lucene' (default): a regex stand-in for Lucene's standard tokenizer (UAX #29 word rules: letters and
            digits join; "6.76", "l'eau", "2,000", "size:xl" stay one token; single characters kept; each CJK
            ideograph and each emoji a token), then the possessive "'s" removed;
            'bm25s': bm25s's own tokenizer and stemming (r"\b\w\w+\b": single characters dropped, "6.76" -> "76";
            PyStemmer's 'porter' as it is).
  scorer    'lucene' (default): |d| as Lucene stores it, one byte per document (SmallFloat.intToByte4: exact below
            24 tokens, above that 24 + (|d| - 24) kept to 4 significant bits), avgdl the exact mean length;
            'bm25s': `bm25s.BM25(method='lucene', k1=0.9, b=0.4)`, the same formula with exact lengths.

Measured against a Lucene 9.5 index rebuilt from the same file (Anserini 0.22.0 `IndexCollection` with WebShop's
flags, searched by Anserini's `SimpleSearcher`, the class behind pyserini's `LuceneSearcher`, from the pyserini 0.22.0
wheel's jar; a scratch check, not a test: it needs Java and the 140 MB wheel):
  analyzer 'lucene' + scorer 'lucene' (default), the first 500 goal instructions (valid split, seed 42) as queries:
    the top 10 identical and in order for 500 of 500, the top 50 for 496 of 500; 300 training-goal instructions and
    200 products' 'query' strings: the top 10 for 499 of 500, the top 50 for 498 of 500 (every difference two
    products whose float64 scores tie here and whose float32 scores differ by one unit in the last place there);
  analyzer 'lucene' + scorer 'bm25s': top-10 overlap 0.986, same top hit 0.986, identical top 10 0.428;
  analyzer 'bm25s' + scorer 'bm25s' (bm25s's defaults): top-10 overlap 0.880, identical top 10 0.048.
  Index terms: 998 of the 1,000 products get exactly Lucene's terms; the stemmer gives Lucene's stem for all 11,475
  distinct words of the products and queries.
What still differs from Lucene: the tokenizer is a regex, not the full UAX #29 rules (emoji outside the listed ranges,
scripts other than Latin and CJK, some rare punctuation between letters, e.g. the halfwidth mark U+FF9F: 2 products
here); scores are float64 sums here, float32 in Lucene, so near-ties can order differently.

Costs (2-core machine): indexing 1,000 products ~0.5-1 s (the Python tokenizer); a search ~0.3-0.9 ms.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

SEARCH_RETURN_N = 50   # WebShop's top-n of a search (engine.py SEARCH_RETURN_N)
K1, B = 0.9, 0.4       # Anserini's / pyserini's BM25 defaults
ANALYZERS = ("lucene", "bm25s")
# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (= bm25s.stopwords.STOPWORDS_EN).
STOP_WORDS = frozenset(("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
                        "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
                        "they", "this", "to", "was", "will", "with"))
# UAX #29 word rules that matter for this text (Lucene's StandardTokenizer): letters and digits join; a letter run
# joins the next over one of  : . ' \u2019 \u2018 \u00b7 \uff1a  (MidLetter / MidNumLet), a digit run over one of
# . , ; ' \u2019 \u2044  (MidNum / MidNumLet); underscores join two runs (ExtendNumLet); each Han or Hiragana character
# is a token; an Extended_Pictographic character (emoji; with its variation selector and zero-width-joiner sequence) is
# a token; vulgar fractions and superscript digits are not word characters.
_IDEO = "\u3040-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RUN = rf"[^\W_{_IDEO}\u00b2\u00b3\u00b9\u00bc-\u00be]+"
_L, _D = r"[^\W\d_]", r"\d"
_JOIN = (rf"(?:(?<={_L})[:.'\u2019\u2018\u00b7\uff1a\ufe13\ufe55](?={_L})|(?<={_D})[.,;'\u2019\u2044](?={_D})"
         r"|_+(?=[^\W_]))")
_PICT = ("[\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u2199\u21a9\u21aa\u231a\u231b\u2328\u2388\u23cf"
         "\u23e9-\u23f3\u23f8-\u23fa\u24c2\u25aa\u25ab\u25b6\u25c0\u25fb-\u25fe\u2600-\u2605\u2607-\u2612"
         "\u2614-\u2685\u2690-\u2705\u2708-\u2712\u2714\u2716\u271d\u2721\u2728\u2733\u2734\u2744\u2747"
         "\u274c\u274e\u2753-\u2755\u2757\u2763-\u2767\u2795-\u2797\u27a1\u27b0\u27bf\u2934\u2935"
         "\u2b05-\u2b07\u2b1b\u2b1c\u2b50\u2b55\u3030\u303d\u3297\u3299\U0001f000-\U0001faff]")
_EMOJI = rf"{_PICT}\ufe0f?(?:\u200d{_PICT}\ufe0f?)*"
_LUCENE_TOKEN = re.compile(rf"{_RUN}(?:{_JOIN}{_RUN})*|[{_IDEO}]|{_EMOJI}", re.UNICODE)
_BM25S_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def _porter():
  import Stemmer  # pylint: disable=g-import-not-at-top  (PyStemmer)
  return Stemmer.Stemmer("porter")


def _consonant(w: str, i: int) -> bool:
  """Porter's consonant: not a, e, i, o, u, and not a 'y' after a consonant."""
  if w[i] in "aeiou":
    return False
  return w[i] != "y" or i == 0 or not _consonant(w, i - 1)


def _measure(w: str) -> int:
  """Porter's m: the number of vowel-consonant sequences in w ([C](VC)^m[V])."""
  m, prev_vowel = 0, False
  for i in range(len(w)):
    c = _consonant(w, i)
    m += int(c and prev_vowel)
    prev_vowel = not c
  return m


def _cvc(w: str) -> bool:
  return (len(w) >= 3 and _consonant(w, -3 % len(w)) and not _consonant(w, len(w) - 2)
          and _consonant(w, len(w) - 1) and w[-1] not in "wxy")


def lucene_porter(stem: str) -> str:
  """Snowball's 'porter' output turned into Lucene's PorterStemmer's for the two step-2 rules where Porter's reference
  C code (which Lucene ports) departs from the published algorithm: 'logi' -> 'log' and 'bli' -> 'ble' (then steps
  4-5 on the '-ble' word). E.g. technologi -> technolog, assembli -> assembl, possibli -> possibl."""
  if stem.endswith("logi") and _measure(stem[:-4]) > 0:
    return stem[:-1]
  if stem.endswith("bli") and not stem.endswith("abli") and _measure(stem[:-3]) > 0:
    w = stem[:-3] + "ble"
    if w.endswith("ible") and _measure(w[:-4]) > 1:
      return w[:-4]
    m = _measure(w[:-1])
    return w[:-1] if m > 1 or (m == 1 and not _cvc(w[:-1])) else w
  return stem


class Analyzer:
  """Text -> index terms: tokenize (`kind`), drop stop words, Porter-stem.

  Args:
    kind: 'lucene' or 'bm25s' (module docstring).
  Raises:
    ValueError: another kind (names config key `env.kwargs.analyzer`).
  """

  def __init__(self, kind: str = "lucene"):
    if kind not in ANALYZERS:
      raise ValueError(f"config `env.kwargs.analyzer` must be one of {ANALYZERS}, got {kind!r}")
    self.kind = kind
    self._stem = _porter().stemWord
    self._cache: dict[str, str] = {}

  def tokens(self, text: str) -> list[str]:
    """The lower-cased tokens before stop words and stemming."""
    text = text.lower()
    if self.kind == "bm25s":
      return _BM25S_TOKEN.findall(text)
    out = []
    for t in _LUCENE_TOKEN.findall(text):
      if t.endswith(("'s", "\u2019s")):   # Lucene's EnglishPossessiveFilter
        t = t[:-2]
      if t:
        out.append(t)
    return out

  def __call__(self, text: str) -> list[str]:
    out = []
    for t in self.tokens(text):
      if t in STOP_WORDS:
        continue
      s = self._cache.get(t)
      if s is None:
        if self.kind == "bm25s":   # bm25s.tokenize(..., stemmer=Stemmer('porter'))
          s = self._stem(t)
        else:                      # Lucene's Porter: 1-2 letters left alone, two step-2 rules of the C code
          s = t if len(t) <= 2 else lucene_porter(self._stem(t))
        self._cache[t] = s
      out.append(s)
    return out


SCORERS = ("lucene", "bm25s")


def lucene_length(length: int) -> int:
  """The document length Lucene's BM25 sees: SmallFloat.byte4ToInt(intToByte4(length)).

  Exact below 24 tokens; above, 24 + (length - 24) with all but its 4 most significant bits cleared.
  Source: Lucene 9 org.apache.lucene.util.SmallFloat and BM25Similarity (norms stored in one byte).
  """
  if length < 24:
    return int(length)
  v = int(length) - 24
  shift = max(v.bit_length() - 4, 0)
  return 24 + ((v >> shift) << shift)


class SearchEngine:
  """BM25 over `contents`, answering WebShop's searches (module docstring).

  Args:
    contents: str[N], the indexed text per product (data.Catalog.contents), in product order.
    ids: str[N], the products' ASINs (ties are broken by ASIN, as pyserini's searcher does).
    analyzer: 'lucene' or 'bm25s' (config key `env.kwargs.analyzer`).
    scorer: 'lucene' or 'bm25s' (config key `env.kwargs.scorer`).
  Raises:
    ValueError: lengths differ, or an unknown analyzer or scorer (names the config key).
  """

  def __init__(self, contents: Sequence[str], ids: Sequence[str], *, analyzer: str = "lucene",
               scorer: str = "lucene"):
    if len(contents) != len(ids):
      raise ValueError(f"SearchEngine: {len(contents)} texts but {len(ids)} ids")
    if scorer not in SCORERS:
      raise ValueError(f"config `env.kwargs.scorer` must be one of {SCORERS}, got {scorer!r}")
    self.analyzer = Analyzer(analyzer)
    self.scorer = scorer
    self.ids = list(ids)
    docs = [self.analyzer(t) for t in contents]
    self.vocab: dict[str, int] = {}
    doc_ids = [[self.vocab.setdefault(t, len(self.vocab)) for t in d] for d in docs]
    # ties by ASIN: the rank of each product's ASIN in sorted order
    self._id_rank = np.argsort(np.argsort(np.array(self.ids, dtype=object)))
    if scorer == "bm25s":
      import bm25s  # pylint: disable=g-import-not-at-top
      self._bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
      self._bm25.index(bm25s.tokenization.Tokenized(ids=doc_ids, vocab=self.vocab), show_progress=False)
      return
    import scipy.sparse  # pylint: disable=g-import-not-at-top
    n, v = len(doc_ids), len(self.vocab)
    rows = np.concatenate([np.asarray(d, np.int64) for d in doc_ids]) if v else np.zeros(0, np.int64)
    cols = np.repeat(np.arange(n), [len(d) for d in doc_ids])
    tf = scipy.sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(v, n))   # duplicates summed: tf
    tf.sum_duplicates()
    df = np.diff(tf.indptr)
    idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
    avgdl = sum(len(d) for d in doc_ids) / max(n, 1)
    norm = K1 * (1.0 - B + B * np.array([lucene_length(len(d)) for d in doc_ids], float) / avgdl)
    w = tf.tocoo()
    data = idf[w.row] * w.data / (w.data + norm[w.col])
    self._weights = scipy.sparse.csr_matrix((data, (w.row, w.col)), shape=(v, n))   # f64[V, N] term x product

  def scores(self, query: str) -> np.ndarray:
    """f64[N] BM25 score of every product for `query` (0 where no term is shared)."""
    q = [self.vocab[t] for t in self.analyzer(query) if t in self.vocab]
    if not q:
      return np.zeros(len(self.ids))
    if self.scorer == "bm25s":
      return np.asarray(self._bm25.get_scores_from_ids(q), np.float64)
    return np.asarray(self._weights[q].sum(axis=0)).ravel()

  def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
    """Indices (into `ids`) of the top `k` products with a positive score, by (score desc, ASIN asc)."""
    s = self.scores(query)
    hit = np.flatnonzero(s > 0)
    order = hit[np.lexsort((self._id_rank[hit], -s[hit]))]
    return [int(i) for i in order[:int(k)]]
