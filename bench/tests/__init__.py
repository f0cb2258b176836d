"""The benchmarks' own tests: helpers, command lines and report sections, without a broker or
Spark (``make unit``; ``make test`` runs them in its broker tier)."""
