"""In-app guides at ``/docs/``: one page per job kind (from its spec plus ``docs/guides/NAME.md``), the
API and CLI reference, the deployment guide and the benchmark reports, rendered from the repository."""
