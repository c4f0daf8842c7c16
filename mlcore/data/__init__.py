"""Offline corpora and procedural generators (no downloads at run time)."""
