"""Offline evaluation of causal language models: held-out perplexity per source and a zero-shot cloze suite."""
