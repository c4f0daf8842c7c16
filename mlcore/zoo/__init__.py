"""Small models with their training recipes (``python -m mlcore.zoo train NAME``)."""
