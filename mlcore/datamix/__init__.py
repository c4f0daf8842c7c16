"""Data-mixture search: FastMix (one proxy, bilevel) and its baselines (uniform, RegMix-lite, DoReMi-lite, a grid).

``problem`` says what every method needs (a proxy to build, per-source batches, a validation set),
``fastmix`` holds the method, ``baselines`` the references, ``sources`` the offline problems.
"""
