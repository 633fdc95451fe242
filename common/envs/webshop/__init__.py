"""WebShop (Yao et al. 2022, arXiv:2207.01206), offline: the text environment of its 1,000-product small mode.

  data.py      the product file, instructed attributes and human instructions, read in place;
  search.py    the search engine: BM25 (bm25s) configured like WebShop's Lucene index;
  goals.py     product prices, synthetic and human goals, the goal shuffle and the splits;
  reward.py    WebShop's purchase reward (type, attribute, option and price terms);
  pages.py     the pages (search, results, item, sub-pages, done), their text and admissible actions;
  env.py       WebShopToolEnv, the ToolEnv served by common.env_server in sandboxed workers;
  baseline.py  `python -m common.envs.webshop.baseline --goals 200`: a random admissible policy's success and score.

The setting is the one verl-agent, GiGPO and PlanPO report (`use_small=True`, `human_goals=False`, 15 steps,
success = reward 1.0, score = the reward). configs/planpo_webshop.py trains on it.
"""
