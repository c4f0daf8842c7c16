"""The team dashboard: views and templates only; it reads through ``webapp.jobs.selectors``."""
