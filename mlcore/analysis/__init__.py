"""Routing analysis and MoE planning: local routing consistency (SRP, SCH), expert-cache
simulation (LRU, LFU, Belady, SCH) and the Efficiency Leverage scaling law.

Importing this package imports numpy only; the numba-compiled cache simulator loads on first use.
"""
