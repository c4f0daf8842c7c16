"""The watermark key registry and the public verification portal (issue 6, ``shared/DESIGN.md``)."""
