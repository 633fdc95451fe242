"""Launch recipes (README, "Launch recipes"): Slurm, Kubernetes, and the node check they run first."""
