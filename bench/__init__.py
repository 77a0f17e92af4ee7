"""lakeshard's benchmarks: each ``bench_*`` module is a script run from the repository's root as
``python -m bench.bench_<name>`` (``make bench`` runs them all), writing its results to ``bench/results/``.

Shared helpers: :mod:`bench.peer_curve` (a figure of lakeshard against its peers over sizes) and :mod:`bench.connect`
(a local Spark Connect server with Delta's engine, for the cases under Connect). A benchmark imports lakeshard
through its packages' faces and other benchmarks through their public names only.
"""
