"""Knowledge distillation of language models: AMiD's α-mixture assistant distribution and its baselines.

``amid`` holds the mathematics (assistant distribution, divergences, the losses), ``pipeline`` the
training and evaluation loop that uses them. Importing this package does not import torch.
"""
