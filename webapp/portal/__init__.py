"""The watermark key registry and the public verification portal (``docs/watermark-portal.md``)."""
